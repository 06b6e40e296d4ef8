//go:build unix

package filewatch_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/filewatch"
	"github.com/modwatch/modwatch/internal/safefile"
)

// The kubelet mounts a ConfigMap's or a Secret's keys as links through
// ..data, which it swaps to a new directory at each change: that file is
// followed. What a swap may put there instead (a named pipe, whose open
// waited for a writer for ever and wedged the watch; a link to /dev/zero,
// read until the process ran out of memory; a file over MaxSize; a
// directory) is reported refused at once, and the watch goes on to the
// next good file.
func TestWatchFollowsKubeletSwapsAndRefusesWhatIsNoFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	var fifos []string
	t.Cleanup(func() { // a reader blocked in a pipe's open is let go, once the test failed
		for _, p := range fifos {
			if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				_ = w.Close()
			}
		}
	})
	n := 0
	// swap makes the key's new version with make, then points ..data at
	// it as the kubelet does: a new link renamed over the old.
	swap := func(make func(p string)) {
		n++
		version := filepath.Join(dir, fmt.Sprintf("..2025_01_01_00_00_%02d.1", n))
		require.NoError(t, os.Mkdir(version, 0o755))
		make(filepath.Join(version, "config.yaml"))
		require.NoError(t, os.Symlink(filepath.Base(version), filepath.Join(dir, "..data_tmp")))
		require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	}
	write := func(data string) func(string) {
		return func(p string) { require.NoError(t, os.WriteFile(p, []byte(data), 0o644)) }
	}
	swap(write("one"))
	require.NoError(t, os.Symlink("..data/config.yaml", path))

	changes := make(chan change, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- filewatch.Watch(ctx, path, 10*time.Millisecond, logr.Discard(), func(data []byte, err error) {
			changes <- change{string(data), err}
		})
	}()
	// next returns the next change other than the last: a refusal is
	// reported at each read, and events before a swap's rename may read
	// the old version again.
	var last change
	same := func(a, b change) bool { return a.data == b.data && fmt.Sprint(a.err) == fmt.Sprint(b.err) }
	next := func() change {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case c := <-changes:
				if same(c, last) {
					continue
				}
				last = c
				return c
			case <-deadline:
				t.Fatal("no change reported: the read is blocked")
				return change{}
			}
		}
	}
	refused := func(reason error, what string) {
		t.Helper()
		c := next()
		require.ErrorIs(t, c.err, reason, what)
		assert.ErrorContains(t, c.err, path, "the error names the file")
		assert.Empty(t, c.data)
	}
	assert.Equal(t, change{data: "one"}, next(), "a key mounted through ..data is read")
	swap(func(p string) { fifos = append(fifos, p); require.NoError(t, syscall.Mkfifo(p, 0o644)) })
	refused(safefile.ErrNotRegular, "a named pipe")
	swap(write("two"))
	assert.Equal(t, change{data: "two"}, next(), "the watch goes on")
	swap(func(p string) { require.NoError(t, os.Symlink("/dev/zero", p)) })
	refused(safefile.ErrNotRegular, "a device")
	swap(write(strings.Repeat("x", filewatch.MaxSize+1)))
	refused(safefile.ErrTooLarge, "a file over MaxSize")
	swap(func(p string) { require.NoError(t, os.Mkdir(p, 0o755)) })
	refused(safefile.ErrNotRegular, "a directory")
	swap(write(strings.Repeat("x", filewatch.MaxSize)))
	assert.Len(t, next().data, filewatch.MaxSize, "a file of MaxSize is read")
	cancel()
	require.NoError(t, <-done)
}
