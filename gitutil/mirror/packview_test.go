package mirror

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// File systems share the decoded index of each pack: opening one after a
// fetch decodes the new pack's index only, and a pack gone from the
// mirror leaves the cache.
func TestFileSystemsShareDecodedIndexes(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a/x", "1"))
	m, err := Open(t.TempDir(), repo.URL(), Options{RepackPacks: 2})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	cached := func() map[plumbing.Hash]any {
		out := map[plumbing.Hash]any{}
		for h, idx := range m.indexes.Cached() {
			out[h] = idx
		}
		return out
	}
	readX := func(commit string) string {
		fsys, err := m.FS(mustHash(commit), at("a"))
		require.NoError(t, err)
		defer fsys.(interface{ Close() error }).Close()
		b, err := fs.ReadFile(fsys, "x")
		require.NoError(t, err)
		return string(b)
	}
	assert.Equal(t, "1", readX(c1))
	first := cached()
	require.Len(t, first, 1)
	assert.Equal(t, "1", readX(c1))
	assert.Equal(t, first, cached(), "the second file system decoded nothing")

	c2 := repo.Commit(t, "two", gittest.File("a/x", "2"))
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.Equal(t, "2", readX(c2))
	second := cached()
	require.Len(t, second, 2)
	for h, idx := range first {
		assert.Same(t, idx, second[h], "the first pack's index is not decoded again")
	}

	c3 := repo.Commit(t, "three", gittest.File("a/x", "3"))
	runtime.GC() // the file systems read so far are collected: none holds a pack
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.True(t, res.Repacked)
	assert.Equal(t, "3", readX(c3))
	assert.Equal(t, "1", readX(c1))
	third := cached()
	assert.Len(t, third, len(packNames(m.dir)), "the replaced packs left the cache")
	for h := range third {
		assert.NotContains(t, second, h)
	}
}

// A mirror may hold loose objects (git writes them for small fetches):
// file systems read them, and a loose object whose content is not its
// name is an error, not the wrong file.
func TestFileSystemReadsLooseObjects(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a/x", "one"), gittest.File("a/y", "why"))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	// Unpack the mirror's one pack into loose objects, as git would.
	packs, err := filepath.Glob(filepath.Join(m.dir, "objects", "pack", "pack-*.pack"))
	require.NoError(t, err)
	require.Len(t, packs, 1)
	pack, err := os.ReadFile(packs[0])
	require.NoError(t, err)
	base := packs[0][:len(packs[0])-len(".pack")]
	for _, ext := range []string{".pack", ".idx", ".rev"} {
		require.NoError(t, os.RemoveAll(base+ext))
	}
	unpack := exec.Command("git", "unpack-objects", "-q")
	unpack.Dir, unpack.Stdin = m.dir, bytes.NewReader(pack)
	out, err := unpack.CombinedOutput()
	require.NoError(t, err, "%s", out)
	m, err = Open(m.dir, repo.URL(), Options{})
	require.NoError(t, err)
	loose := func(h string) string { return filepath.Join(m.dir, "objects", h[:2], h[2:]) }
	x := repo.Git(t, "rev-parse", c1+":a/x")
	y := repo.Git(t, "rev-parse", c1+":a/y")
	require.FileExists(t, loose(x))

	fsys, err := m.FS(mustHash(c1), at("a"))
	require.NoError(t, err)
	b, err := fs.ReadFile(fsys, "x")
	require.NoError(t, err)
	assert.Equal(t, "one", string(b))
	info, err := fs.Stat(fsys, "y")
	require.NoError(t, err)
	assert.Equal(t, int64(3), info.Size())
	require.NoError(t, fsys.(interface{ Close() error }).Close())

	// y's file now holds x: read as y, it is refused.
	data, err := os.ReadFile(loose(x))
	require.NoError(t, err)
	require.NoError(t, os.Chmod(loose(y), 0o644))
	require.NoError(t, os.WriteFile(loose(y), data, 0o444))
	fsys, err = m.FS(mustHash(c1), at("a"))
	require.NoError(t, err)
	_, err = fs.ReadFile(fsys, "y")
	assert.ErrorContains(t, err, "does not hash to the object's name")
}
