//go:build unix

package safefile

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOpenCheckedSwapped opens what openKind's look did not see: a file
// swapped for a named pipe, a link or a device between the look and the
// open. The open neither blocks nor follows, and the descriptor's type
// is checked.
func TestOpenCheckedSwapped(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o600))
	require.NoError(t, os.Symlink("file", filepath.Join(dir, "link")))
	tests := []struct {
		name  string
		links Links
		want  fs.FileMode
		err   error
	}{
		{"fifo", NoFollow, 0, ErrNotRegular},
		{"fifo", Follow, fs.ModeDir, ErrNotDir},
		{"link", NoFollow, 0, ErrLink},
		{"/dev/null", Follow, 0, ErrNotRegular},
		{".", NoFollow, 0, ErrNotRegular},
		{"file", NoFollow, fs.ModeDir, ErrNotDir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.name
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			done := make(chan error, 1)
			go func() {
				f, err := openChecked(p, tt.links, tt.want)
				if err == nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				require.ErrorIs(t, err, tt.err)
			case <-time.After(10 * time.Second):
				if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					_ = w.Close()
				}
				t.Fatal("the open blocked")
			}
		})
	}
}
