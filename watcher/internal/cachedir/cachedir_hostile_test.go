//go:build unix

package cachedir

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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
				var c *Dir
				if c, err = Open(dir); err == nil {
					c.Close()
				}
			})
			require.Error(t, err)
			assert.Contains(t, err.Error(), dir)
			assert.NoFileExists(t, elsewhere, "nothing is made through a link")
			assert.NoDirExists(t, filepath.Join(dir, ".tmp"), "the directory is not taken")
		})
	}
	c, err := Open(t.TempDir())
	require.NoError(t, err, "a lock file of its own is taken")
	c.Close()
}

// promptly runs f, and fails the test when it blocks (on the named pipe
// fifo: it is opened for writing, to let f go).
func promptly(t *testing.T, fifo string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = w.Close()
		}
		t.Fatal("blocked: did not return within 10 s")
	}
}
