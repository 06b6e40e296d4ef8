package watcher

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
)

func TestStores(t *testing.T) {
	fileStore, err := NewFileStore(filepath.Join(t.TempDir(), "cp"))
	require.NoError(t, err)
	for name, s := range map[string]Store{"memory": NewMemoryStore(), "file": fileStore} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			_, ok, err := s.Get(ctx, "t/sink")
			require.NoError(t, err)
			assert.False(t, ok)
			cp := Checkpoint{Commit: hashOf("c1"), Tree: hashOf("t1"), Target: "f", Time: time.Unix(1700000000, 0).UTC()}
			require.NoError(t, s.Put(ctx, "t/sink", cp))
			require.NoError(t, s.Put(ctx, "other/sink", Checkpoint{Commit: hashOf("x")}))
			first, _, err := s.Get(ctx, "other/sink")
			require.NoError(t, err)
			require.NoError(t, s.Put(ctx, "other/sink", Checkpoint{Commit: hashOf("y")}))
			again, _, err := s.Get(ctx, "other/sink")
			require.NoError(t, err)
			assert.Equal(t, hashOf("y"), again.Commit, "a Put replaces the checkpoint")
			assert.Equal(t, hashOf("x"), first.Commit, "what Get returned before is the caller's")
			got, ok, err := s.Get(ctx, "t/sink")
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, cp, got)
			require.NoError(t, s.Delete(ctx, "t/sink"))
			require.NoError(t, s.Delete(ctx, "t/sink"), "deleting twice is fine")
			_, ok, _ = s.Get(ctx, "t/sink")
			assert.False(t, ok)
			_, ok, _ = s.Get(ctx, "other/sink")
			assert.True(t, ok)
		})
	}
}

func TestFileStoreSurvivesACrashMidWrite(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.Put(ctx, "k", Checkpoint{Commit: hashOf("good")}))

	// A crash between writing the temporary file and renaming it leaves the
	// temporary file behind and the checkpoint as it was.
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte(`{"key":"k","checkpoint":{"commit":"ha`), 0o644))
	s, err = NewFileStore(dir)
	require.NoError(t, err)
	got, ok, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, hashOf("good"), got.Commit)
	assert.NoFileExists(t, filepath.Join(dir, ".tmp-123"), "a killed writer's temporary file is removed at start")

	// A torn file (a file system without atomic rename) is an error that
	// names the key and says it is unreadable (the watcher then delivers
	// again), never a silent "delivered".
	require.NoError(t, os.WriteFile(s.path("k"), []byte(`{"key":"k","checkp`), 0o644))
	_, _, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, ErrCheckpointUnreadable)
	assert.Contains(t, err.Error(), ": k in ")
}

// A directory where a record should be (what a missing subPath mount
// makes) is unreadable like a torn file, not an error retried for ever,
// and the next Put replaces it with the record.
func TestFileStoreDirectoryInARecordsPlace(t *testing.T) {
	s, err := NewFileStore(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, os.MkdirAll(filepath.Join(s.path("k"), "sub"), 0o755))
	_, ok, err := s.Get(ctx, "k")
	require.ErrorIs(t, err, ErrCheckpointUnreadable)
	assert.False(t, ok)
	require.NoError(t, s.Put(ctx, "k", Checkpoint{Commit: hashOf("c")}))
	got, ok, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, hashOf("c"), got.Commit)
}

// A Put never changes the file a reader already opened: it writes a new
// file and renames it into place, so a reader (or a crash) sees the old
// checkpoint whole or the new one whole, never a mix or a truncated file.
func TestFileStorePutReplacesTheFileWhole(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.Put(ctx, "k", Checkpoint{Commit: hashOf("old")}))
	reader, err := os.Open(s.path("k"))
	require.NoError(t, err)
	defer reader.Close()

	require.NoError(t, s.Put(ctx, "k", Checkpoint{Commit: hashOf("new"), Reads: []string{strings.Repeat("t", 100)}}))
	data, err := io.ReadAll(reader)
	require.NoError(t, err)
	var rec fileRecord
	require.NoError(t, json.Unmarshal(data, &rec), "the file a reader holds was changed in place: %q", data)
	assert.Equal(t, hashOf("old"), rec.Checkpoint.Commit)
	got, _, err := s.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, hashOf("new"), got.Commit)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left")
}

// What a MemoryStore itself holds for each checkpoint (its map and its
// copies; the strings are the caller's), at a replica's share and at
// the whole of 100,000 targets: a map's table doubles, so the bytes a
// checkpoint are uneven between sizes.
func BenchmarkMemoryStoreHeld(b *testing.B) {
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for _, n := range []int{10_000, 33_334, 50_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			keys, cps := make([]string, n), make([]Checkpoint, n)
			for i := range n {
				keys[i] = fmt.Sprintf("route\x00team-%d/app-%d\x00sink", i/10, i)
				sum := sha256.Sum256([]byte(keys[i]))
				cps[i] = Checkpoint{Commit: gitutil.Hash(sum[:20]), Tree: gitutil.Hash(sum[12:]), Target: hex.EncodeToString(sum[:12]), Time: time.Unix(int64(i), 0)}
			}
			ctx := context.Background()
			var held uint64
			for b.Loop() {
				before := heap()
				s := NewMemoryStore()
				for i := range keys {
					if err := s.Put(ctx, keys[i], cps[i]); err != nil {
						b.Fatal(err)
					}
				}
				held = heap() - before
				runtime.KeepAlive(s)
			}
			b.ReportMetric(float64(held)/float64(n), "B/checkpoint")
		})
	}
}

// hashOf is a hash named by name, for checkpoints whose commits need only
// be told apart.
func hashOf(name string) gitutil.Hash { return gitutil.Hash(sha1.Sum([]byte(name))) }

// A checkpoint file as the store writes it keeps its form: hashes in hex,
// a tree that digests reads prefixed with "r", none as "". A file of that
// form reads back as the Checkpoint it holds, and a Put of it writes the
// same bytes.
func TestFileStoreCheckpointForm(t *testing.T) {
	const commit, tree = "0123456789abcdef0123456789abcdef01234567", "89abcdef0123456789abcdef0123456789abcdef"
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		file string
		want Checkpoint
	}{
		{"plain", `{"key":"k","checkpoint":{"commit":"` + commit + `","tree":"` + tree + `","target":"fp","time":"2026-01-02T03:04:05Z"}}`,
			Checkpoint{Commit: hash(t, commit), Tree: hash(t, tree), Target: "fp", Time: when}},
		{"with reads", `{"key":"k","checkpoint":{"commit":"` + commit + `","tree":"r` + tree + `","reads":["base"],"target":"fp","time":"2026-01-02T03:04:05Z","suspended":true}}`,
			Checkpoint{Commit: hash(t, commit), Tree: hash(t, tree), Reads: []string{"base"}, Target: "fp", Time: when, Suspended: true}},
		{"without a tree", `{"key":"k","checkpoint":{"commit":"` + commit + `","tree":"","target":"fp","time":"2026-01-02T03:04:05Z"}}`,
			Checkpoint{Commit: hash(t, commit), Target: "fp", Time: when}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewFileStore(t.TempDir())
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(s.path("k"), []byte(tc.file), 0o644))
			got, ok, err := s.Get(t.Context(), "k")
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, tc.want, got)
			require.NoError(t, os.Remove(s.path("k")))
			require.NoError(t, s.Put(t.Context(), "k", got))
			written, err := os.ReadFile(s.path("k"))
			require.NoError(t, err)
			assert.Equal(t, tc.file, string(written))
		})
	}
}

// A stored hash that is not one makes the record unreadable: the
// watcher delivers the target again and rewrites it.
func TestFileStoreCheckpointWithABadHash(t *testing.T) {
	s, err := NewFileStore(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(s.path("k"), []byte(`{"key":"k","checkpoint":{"commit":"c1","tree":"","target":"fp","time":"2026-01-02T03:04:05Z"}}`), 0o644))
	_, ok, err := s.Get(t.Context(), "k")
	require.ErrorIs(t, err, ErrCheckpointUnreadable)
	assert.False(t, ok)
}

func hash(t *testing.T, s string) gitutil.Hash {
	t.Helper()
	h, err := gitutil.ParseHash(s)
	require.NoError(t, err)
	return h
}
