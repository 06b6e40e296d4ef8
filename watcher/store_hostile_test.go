//go:build unix

package watcher

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// promptly runs f and fails the test if it has not returned within a
// deadline far above what it takes: the guard that turns a read blocked
// for ever into a failure. A named pipe at fifo is opened for writing
// then, so that a reader blocked in it returns.
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

// recordFile is the file Put would write for key and cp, padded with spaces
// (which JSON ignores) to size bytes when size is larger.
func recordFile(t *testing.T, key string, cp Checkpoint, size int) []byte {
	data, err := json.Marshal(fileRecord{Key: key, Checkpoint: cp})
	require.NoError(t, err)
	if len(data) < size {
		data = append(data, bytes.Repeat([]byte(" "), size-len(data))...)
	}
	return data
}

// What the store never writes in a record's place is not read, not
// followed and does not block: a named pipe, a link (to a device, to a
// valid record elsewhere), a file over the bound. Each is unreadable
// (the watcher delivers again) and the next Put replaces it, leaving what
// a link named alone. The store's own directory is reached through a
// link, as one a program is handed may be: only the record's own name
// must not be one.
func TestFileStoreRefusesWhatItNeverWrote(t *testing.T) {
	elsewhere := t.TempDir()
	valid := filepath.Join(elsewhere, "valid.json")
	require.NoError(t, os.WriteFile(valid, recordFile(t, "k", Checkpoint{Commit: hashOf("planted")}, 0), 0o644))
	tests := []struct {
		name   string
		plant  func(t *testing.T, p string)
		reason string
	}{
		{"named pipe", func(t *testing.T, p string) { require.NoError(t, syscall.Mkfifo(p, 0o644)) }, "named pipe"},
		{"link to /dev/zero", func(t *testing.T, p string) { require.NoError(t, os.Symlink("/dev/zero", p)) }, "symbolic link"},
		{"link to a valid record", func(t *testing.T, p string) { require.NoError(t, os.Symlink(valid, p)) }, "symbolic link"},
		{"dangling link", func(t *testing.T, p string) { require.NoError(t, os.Symlink(filepath.Join(elsewhere, "none"), p)) }, "symbolic link"},
		{"over the bound", func(t *testing.T, p string) {
			require.NoError(t, os.WriteFile(p, recordFile(t, "k", Checkpoint{Commit: hashOf("big")}, maxCheckpointFile+1), 0o644))
		}, "too large"},
		{"a sparse file of 1 TiB", func(t *testing.T, p string) {
			require.NoError(t, os.WriteFile(p, nil, 0o644))
			require.NoError(t, os.Truncate(p, 1<<40)) // os.ReadFile asked for 1 TiB at once
		}, "too large"},
		{"directory", func(t *testing.T, p string) { require.NoError(t, os.MkdirAll(filepath.Join(p, "sub"), 0o755)) }, "directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			real := t.TempDir()
			link := filepath.Join(t.TempDir(), "store")
			require.NoError(t, os.Symlink(real, link))
			s, err := NewFileStore(link)
			require.NoError(t, err)
			p := s.path("k")
			tt.plant(t, p)

			var ok bool
			promptly(t, p, func() { _, ok, err = s.Get(t.Context(), "k") })
			require.ErrorIs(t, err, ErrCheckpointUnreadable)
			assert.False(t, ok)
			assert.Contains(t, err.Error(), ": k: ", "the key is named")
			assert.Contains(t, err.Error(), p, "the file is named")
			assert.Contains(t, err.Error(), tt.reason)

			require.NoError(t, s.Put(t.Context(), "k", Checkpoint{Commit: hashOf("c")}))
			cp, ok, err := s.Get(t.Context(), "k")
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, hashOf("c"), cp.Commit)
			fi, err := os.Lstat(p)
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "the record is a file of the store's again")
			planted, err := os.ReadFile(valid)
			require.NoError(t, err)
			assert.Contains(t, string(planted), hashOf("planted").String(), "what a link named is left alone")
		})
	}
}

// A Get whose context is done says so, not that the record is
// unreadable: the watcher would take it for absent and deliver again.
func TestFileStoreGetHonoursItsContext(t *testing.T) {
	s, err := NewFileStore(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, s.Put(t.Context(), "k", Checkpoint{Commit: hashOf("c")}))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, ok, err := s.Get(ctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ErrCheckpointUnreadable)
	assert.False(t, ok)
}

// What took a temporary file's name (a directory with files in it, a
// named pipe, a link) is removed at start and does not keep the store
// from opening; a link's target stays.
func TestFileStoreClearsWhatTookATemporaryName(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, ".tmp-dir", "sub"), 0o755))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, ".tmp-fifo"), 0o644))
	require.NoError(t, os.Symlink(elsewhere, filepath.Join(dir, ".tmp-link")))
	require.NoError(t, os.WriteFile(filepath.Join(elsewhere, "kept"), nil, 0o644))
	s, err := NewFileStore(dir)
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
	assert.FileExists(t, filepath.Join(elsewhere, "kept"))
	require.NoError(t, s.Put(t.Context(), "k", Checkpoint{Commit: hashOf("c")}))
}
