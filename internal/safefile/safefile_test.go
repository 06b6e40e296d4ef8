//go:build unix

package safefile_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/safefile"
)

// prompt runs f and fails the test if it has not returned within a
// deadline far above what it takes (a blocked open never returns): the
// guard that turns a hang into a failure. fifos are opened for writing
// then, so that a reader blocked in them returns.
func prompt(t *testing.T, f func(), fifos ...string) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		for _, p := range fifos {
			if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				_ = w.Close()
			}
		}
		t.Fatal("blocked: did not return within 10 s")
	}
}

// tree makes the files the table reads, in a directory of its own.
func tree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, data string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600))
	}
	write("file", "hello")
	write("empty", "")
	write("ten", "0123456789")
	write("eleven", "0123456789a")
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "dir"), 0o700))
	for link, target := range map[string]string{
		"zero": "/dev/zero", "tofile": "file", "tofifo": "fifo", "todir": "dir", "dangling": "nowhere",
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(dir, link)))
	}
	// A Secret as the kubelet mounts it: key -> ..data/key, ..data ->
	// ..2025_01_01_00_00_00.1/, which holds the file.
	require.NoError(t, os.Mkdir(filepath.Join(dir, "secret"), 0o700))
	ts := filepath.Join(dir, "secret", "..2025_01_01_00_00_00.1")
	require.NoError(t, os.Mkdir(ts, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(ts, "token"), []byte("s3cret"), 0o600))
	require.NoError(t, os.Symlink(filepath.Base(ts), filepath.Join(dir, "secret", "..data")))
	require.NoError(t, os.Symlink("..data/token", filepath.Join(dir, "secret", "token")))
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return dir
}

func TestReadFile(t *testing.T) {
	dir := tree(t)
	tests := []struct {
		name  string
		links safefile.Links
		limit int64
		want  string
		err   error // nil: want is read
	}{
		{"file", safefile.NoFollow, 100, "hello", nil},
		{"file", safefile.Follow, 100, "hello", nil},
		{"empty", safefile.NoFollow, 0, "", nil},
		{"ten", safefile.NoFollow, 10, "0123456789", nil},
		{"eleven", safefile.NoFollow, 10, "", safefile.ErrTooLarge},
		{"eleven", safefile.Follow, 0, "", safefile.ErrTooLarge},
		{"missing", safefile.NoFollow, 100, "", fs.ErrNotExist},
		{"missing", safefile.Follow, 100, "", fs.ErrNotExist},
		{"fifo", safefile.NoFollow, 100, "", safefile.ErrNotRegular},
		{"fifo", safefile.Follow, 100, "", safefile.ErrNotRegular},
		{"sock", safefile.Follow, 100, "", safefile.ErrNotRegular},
		{"dir", safefile.NoFollow, 100, "", safefile.ErrNotRegular},
		{"zero", safefile.NoFollow, 100, "", safefile.ErrLink},
		{"zero", safefile.Follow, 1 << 40, "", safefile.ErrNotRegular},
		{"tofile", safefile.NoFollow, 100, "", safefile.ErrLink},
		{"tofile", safefile.Follow, 100, "hello", nil},
		{"tofifo", safefile.NoFollow, 100, "", safefile.ErrLink},
		{"tofifo", safefile.Follow, 100, "", safefile.ErrNotRegular},
		{"todir", safefile.Follow, 100, "", safefile.ErrNotRegular},
		{"dangling", safefile.NoFollow, 100, "", safefile.ErrLink},
		{"dangling", safefile.Follow, 100, "", fs.ErrNotExist},
		{"secret/token", safefile.Follow, 100, "s3cret", nil},
		{"secret/token", safefile.NoFollow, 100, "", safefile.ErrLink},
		{"secret/..data", safefile.Follow, 100, "", safefile.ErrNotRegular},
	}
	for _, tt := range tests {
		name := tt.name
		if tt.links == safefile.Follow {
			name += "/follow"
		}
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			var data []byte
			var err error
			prompt(t, func() { data, err = safefile.ReadFile(t.Context(), p, tt.limit, tt.links) }, filepath.Join(dir, "fifo"))
			if tt.err == nil {
				require.NoError(t, err)
				assert.Equal(t, tt.want, string(data))
				return
			}
			require.ErrorIs(t, err, tt.err)
			assert.Nil(t, data)
			var pe *fs.PathError
			require.ErrorAs(t, err, &pe, "the error names the path")
			assert.Equal(t, p, pe.Path)
			assert.Equal(t, tt.err != fs.ErrNotExist, errors.Is(err, safefile.ErrRefused), "refused, or absent: never both")
			assert.NotContains(t, err.Error(), "s3cret", "no content in an error")
		})
	}
}

func TestReadFileNegativeLimit(t *testing.T) {
	p := filepath.Join(tree(t), "file")
	_, err := safefile.ReadFile(t.Context(), p, -1, safefile.NoFollow)
	require.Error(t, err)
	assert.Contains(t, err.Error(), p)
}

func TestReadFileDoneContext(t *testing.T) {
	p := filepath.Join(tree(t), "file")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := safefile.ReadFile(ctx, p, 100, safefile.NoFollow)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, safefile.ErrRefused)
	assert.Contains(t, err.Error(), p)
}

// countdown is a context whose Err is nil for its first n looks, then
// Canceled: it ends while a read is under way.
type countdown struct {
	context.Context
	n int
}

func (c *countdown) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

func TestReadFileStopsBetweenChunks(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	require.NoError(t, os.WriteFile(p, []byte(strings.Repeat("x", 1<<20)), 0o600))
	ctx := &countdown{Context: t.Context(), n: 3}
	_, err := safefile.ReadFile(ctx, p, 2<<20, safefile.NoFollow)
	require.ErrorIs(t, err, context.Canceled, "the context is looked at between chunks")
	assert.Negative(t, ctx.n, "it stopped at the first look after the end")
	data, err := safefile.ReadFile(t.Context(), p, 2<<20, safefile.NoFollow)
	require.NoError(t, err)
	assert.Len(t, data, 1<<20)
}

func TestOpen(t *testing.T) {
	dir := tree(t)
	for name, want := range map[string]error{
		"file": nil, "fifo": safefile.ErrNotRegular, "dir": safefile.ErrNotRegular, "tofile": safefile.ErrLink, "zero": safefile.ErrLink, "missing": fs.ErrNotExist,
	} {
		t.Run(name, func(t *testing.T) {
			var f *os.File
			var err error
			prompt(t, func() { f, err = safefile.Open(filepath.Join(dir, name), safefile.NoFollow) }, filepath.Join(dir, "fifo"))
			if want != nil {
				require.ErrorIs(t, err, want)
				assert.Nil(t, f)
				return
			}
			require.NoError(t, err)
			defer f.Close()
			buf := make([]byte, 10)
			n, _ := f.Read(buf)
			assert.Equal(t, "hello", string(buf[:n]))
		})
	}
}

func TestOpenDirAndReadDir(t *testing.T) {
	dir := tree(t)
	tests := []struct {
		name  string
		links safefile.Links
		err   error
	}{
		{"dir", safefile.NoFollow, nil},
		{"todir", safefile.Follow, nil},
		{"todir", safefile.NoFollow, safefile.ErrLink},
		{"fifo", safefile.NoFollow, safefile.ErrNotDir},
		{"tofifo", safefile.Follow, safefile.ErrNotDir},
		{"file", safefile.NoFollow, safefile.ErrNotDir},
		{"missing", safefile.NoFollow, fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			var err error
			prompt(t, func() {
				var d *os.File
				if d, err = safefile.OpenDir(p, tt.links); err == nil {
					err = d.Close()
				}
			}, filepath.Join(dir, "fifo"))
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
			} else {
				require.NoError(t, err)
			}
			prompt(t, func() { _, err = safefile.ReadDir(p, tt.links) }, filepath.Join(dir, "fifo"))
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
			} else {
				require.NoError(t, err)
			}
		})
	}
	entries, err := safefile.ReadDir(dir, safefile.NoFollow)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"dangling", "dir", "eleven", "empty", "fifo", "file", "secret", "sock", "ten", "todir", "tofifo", "tofile", "zero"}
	assert.Equal(t, want, names, "every entry, sorted, none followed")
}
