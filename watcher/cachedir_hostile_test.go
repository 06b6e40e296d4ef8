//go:build unix

package watcher

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The cache directory's lock file is the watcher's own: a named pipe in
// its place (whose open waited for a writer for ever, so that Run never
// started nor stopped) or a link (followed, creating and locking a file
// elsewhere) is refused at once, and the watcher does not take the
// directory.
func TestCacheDirLockIsNeverAPipeOrALink(t *testing.T) {
	elsewhere := filepath.Join(t.TempDir(), "their-file")
	for name, plant := range map[string]func(t *testing.T, lock string){
		"named pipe":        func(t *testing.T, lock string) { require.NoError(t, syscall.Mkfifo(lock, 0o600)) },
		"link":              func(t *testing.T, lock string) { require.NoError(t, os.Symlink(elsewhere, lock)) },
		"link to /dev/null": func(t *testing.T, lock string) { require.NoError(t, os.Symlink("/dev/null", lock)) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			lock := filepath.Join(dir, ".lock")
			plant(t, lock)
			var err error
			promptly(t, lock, func() {
				var c *cacheDir
				if c, err = openCacheDir(dir); err == nil {
					c.close()
				}
			})
			require.Error(t, err)
			assert.Contains(t, err.Error(), dir)
			assert.NoFileExists(t, elsewhere, "nothing is made through a link")
			assert.NoDirExists(t, filepath.Join(dir, ".tmp"), "the directory is not taken")
		})
	}
	c, err := openCacheDir(t.TempDir())
	require.NoError(t, err, "a lock file of its own is taken")
	c.close()
}
