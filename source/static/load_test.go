//go:build unix

package static_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/safefile"
	"github.com/modwatch/modwatch/source/static"
)

// A target file is followed through links (a mounted ConfigMap's key is
// one, through ..data) to a regular file only: a named pipe, whose open
// waited for a writer for ever, and a link to /dev/zero, read until the
// process ran out of memory, are refused at once; so is a file over the
// bound, as an invalid file.
func TestLoadRefusesWhatIsNoFile(t *testing.T) {
	dir := t.TempDir()
	good := "targets: [{id: a, url: 'https://h/r'}]"
	version := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	require.NoError(t, os.Mkdir(version, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(version, "targets.yaml"), []byte(good), 0o644))
	require.NoError(t, os.Symlink(filepath.Base(version), filepath.Join(dir, "..data")))
	require.NoError(t, os.Symlink("..data/targets.yaml", filepath.Join(dir, "targets.yaml")))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	require.NoError(t, os.Symlink(fifo, filepath.Join(dir, "tofifo")))
	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(dir, "zero")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big"), []byte(strings.Repeat(" ", 4<<20+1)), 0o644))
	t.Cleanup(func() { // a reader blocked in the pipe's open is let go, once the test failed
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = w.Close()
		}
	})
	for name, want := range map[string]error{
		"targets.yaml": nil,
		"fifo":         safefile.ErrNotRegular,
		"tofifo":       safefile.ErrNotRegular,
		"zero":         safefile.ErrNotRegular,
		"..data":       safefile.ErrNotRegular,
		"big":          static.ErrInvalidFile,
		"missing":      fs.ErrNotExist,
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name)
			done := make(chan error, 1)
			go func() { _, err := static.Load(p); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Load blocked")
			}
			if want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, want)
			assert.ErrorContains(t, err, p)
			assert.Equal(t, !errors.Is(want, fs.ErrNotExist), errors.Is(err, safefile.ErrRefused) || errors.Is(err, static.ErrInvalidFile))
		})
	}
}
