//go:build unix

package gitutil

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil/internal/packidx"
	"github.com/modwatch/modwatch/internal/gittest"
)

// The whole of it, on a mirror: a repository of 40,000 files (an index of
// 1.1 MB, mapped), its index cut short under a file system that reads it,
// and a commit pushed: the read is an error (the mirror marked damaged),
// and the next fetch rebuilds the mirror and delivers the new commit.
func TestMirrorHealsAMappedIndexCutShort(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/big")
	files := gittest.Numbered(40000, func(i int) string { return fmt.Sprintf("d%02d/f%05d", i%100, i) })
	c := mustHash(repo.Commit(t, "big", files...))
	dir := t.TempDir()
	m, err := OpenMirror(dir, repo.URL(), MirrorOptions{GitCLI: "git"})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	idxs, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.idx"))
	require.Len(t, idxs, 1)
	st, err := os.Stat(idxs[0])
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Size(), int64(packidx.MapThreshold), "mapped")
	fsys, err := m.FS(c, at(""))
	require.NoError(t, err)
	_, err = fs.ReadFile(fsys, "d07/f00007")
	require.NoError(t, err)
	require.NoError(t, os.Truncate(idxs[0], 8192))
	c2 := mustHash(repo.Commit(t, "next", gittest.File("d01/new", "x")))
	_, err = fs.ReadFile(fsys, "d99/f39999")
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, err, packidx.ErrFault)
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.ErrorContains(t, res.Rebuilt, "cut short")
	fsys, err = m.FS(c2, at(""))
	require.NoError(t, err)
	data, err := fs.ReadFile(fsys, "d99/f39999")
	require.NoError(t, err)
	require.Equal(t, "39999", string(data))
}
