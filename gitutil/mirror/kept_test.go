package mirror

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// packsOf lists a mirror's packs on disk.
func packsOf(t *testing.T, m *Mirror) []string {
	t.Helper()
	packs, err := filepath.Glob(filepath.Join(m.dir, "objects", "pack", "pack-*.pack"))
	require.NoError(t, err)
	return packs
}

// collect runs garbage collections enough for what was handed on before to
// count as kept, when still referenced (see overKept).
func collect() {
	runtime.GC()
	runtime.GC()
}

// File systems handed on (Detach) and kept past the mirror's bound are
// released, the oldest first: their reads fail with ErrReleased, not as
// damage, and the packs only they read go at the next fetch. One still
// being read by whoever made it (not handed on) is never released.
func TestKeptFileSystemsPastTheBoundAreReleased(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := mustHash(repo.Commit(t, "1", gittest.File("f", "1")))
	m, err := Open(t.TempDir(), repo.URL(), Options{RepackPacks: 1, MaxKept: 1})
	require.NoError(t, err)
	fetch := func() {
		t.Helper()
		_, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
		require.NoError(t, err)
	}
	fetch()
	oldest, err := m.FS(c1, at(""))
	require.NoError(t, err)
	inUse, err := m.FS(c1, at(""))
	require.NoError(t, err)
	Detach(oldest)
	firstPacks := packsOf(t, m)

	var last fs.FS
	for _, v := range []string{"2", "3"} {
		c := mustHash(repo.Commit(t, v, gittest.File("f", v)))
		fetch()
		last, err = m.FS(c, at(""))
		require.NoError(t, err)
		Detach(last)
	}
	assert.Positive(t, m.Kept().PackBytes, "the first packs are kept for those that read them")

	collect()
	repo.Commit(t, "4", gittest.File("f", "4"))
	fetch()

	_, err = fs.ReadFile(oldest, "f")
	require.ErrorIs(t, err, ErrReleased, "the oldest kept is released")
	data, err := fs.ReadFile(last, "f")
	require.NoError(t, err, "the newest kept still reads")
	assert.Equal(t, "3", string(data))
	data, err = fs.ReadFile(inUse, "f")
	require.NoError(t, err, "one not handed on is never released")
	assert.Equal(t, "1", string(data))
	assert.Equal(t, 1, m.Kept().Trees)
	m.mu.Lock()
	assert.Nil(t, m.broken, "a read of a released file system is no damage")
	m.mu.Unlock()

	// inUse is read no more: collected, it holds nothing.
	collect()
	repo.Commit(t, "5", gittest.File("f", "5"))
	fetch()
	for _, p := range firstPacks {
		_, err := os.Stat(p)
		assert.ErrorIs(t, err, os.ErrNotExist, "%s: read only by released and collected file systems", filepath.Base(p))
	}
	runtime.KeepAlive(oldest)
	runtime.KeepAlive(last)
}
