//go:build unix

package configmap_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/safefile"
)

// A ConfigMap's key swapped (as the kubelet swaps ..data) for a named pipe,
// whose open waited for a writer for ever, or a link to /dev/zero, read
// until the process ran out of memory, is refused at once: no set, the
// last good targets stay, and the next good version is taken.
func TestAPipeOrADeviceInTheMountIsRefused(t *testing.T) {
	dir := t.TempDir()
	update := kubelet(t, dir, config("main"))
	r := start(t, filepath.Join(dir, "config.yaml"))
	assert.Equal(t, "main", r.revision(t))

	var fifo string
	t.Cleanup(func() { // a reader blocked in the pipe's open is let go, once the test failed
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = w.Close()
		}
	})
	for name, plant := range map[string]func(p string){
		"named pipe":        func(p string) { fifo = p; require.NoError(t, syscall.Mkfifo(p, 0o644)) },
		"link to /dev/zero": func(p string) { require.NoError(t, os.Symlink("/dev/zero", p)) },
	} {
		swap(t, dir, plant)
		rl := r.nextReload(t)
		require.ErrorIs(t, rl.Err, safefile.ErrNotRegular, name)
		assert.Len(t, rl.Targets, 1, "the last good set stays")
		require.ErrorIs(t, r.nextNoSet(t), safefile.ErrNotRegular)
		update(config("release-2"))
		assert.Equal(t, "release-2", r.revision(t), "the next good version is taken")
		update(config("main"))
		assert.Equal(t, "main", r.revision(t))
	}
	r.noMore(t)
}

// swap points the mount's ..data at a new version whose config.yaml plant
// makes, as the kubelet's AtomicWriter would.
func swap(t *testing.T, dir string, plant func(p string)) {
	t.Helper()
	version, err := os.MkdirTemp(dir, "..2026_12_01_")
	require.NoError(t, err)
	plant(filepath.Join(version, "config.yaml"))
	tmp := filepath.Join(dir, "..data_tmp")
	require.NoError(t, os.Symlink(filepath.Base(version), tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
}
