//go:build unix

package mirror

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil/internal/packidx"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// The whole of it, on a mirror: a repository of 40,000 files (an index of
// 1.1 MB, mapped), its index damaged under a file system that reads it,
// and a commit pushed: the read is an error (the mirror marked damaged),
// never a panic nor a miss, and the next fetch rebuilds the mirror and
// delivers the new commit. Damaged twice on the same mirror, one after
// the other: cut short (a read of the pages past the new end faults), then
// rewritten in place at its size (the mapping reads the new bytes: a
// fanout still ascending, but counting far past the index).
func TestMirrorHealsAMappedIndexDamagedUnderIt(t *testing.T) {
	srv := gittest.NewServer(t)
	// gittest's git runs with HOME at the server's root: no gc detached
	// from a commit of 40,000 objects, still writing in the work tree
	// when the test removes it (a machine under load).
	require.NoError(t, os.WriteFile(filepath.Join(srv.Root(), ".gitconfig"), []byte("[gc]\n\tauto = 0\n"), 0o644))
	repo := srv.NewRepo(t, "g/big")
	files := gittest.Numbered(40000, func(i int) string { return fmt.Sprintf("d%02d/f%05d", i%100, i) })
	c := mustHash(repo.Commit(t, "big", files...))
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{GitCLI: "git"})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	for i, damage := range []struct {
		name string
		do   func(t *testing.T, idx string)
		err  error
	}{
		{"cut short", func(t *testing.T, idx string) { require.NoError(t, os.Truncate(idx, 8192)) }, packidx.ErrFault},
		{"rewritten in place", fanoutPastTheIndex, packidx.ErrCorrupt},
	} {
		idxs, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.idx"))
		require.Len(t, idxs, 1, damage.name)
		st, err := os.Stat(idxs[0])
		require.NoError(t, err)
		require.GreaterOrEqual(t, st.Size(), int64(packidx.MapThreshold), "mapped")
		fsys, err := m.FS(c, at(""))
		require.NoError(t, err)
		_, err = fs.ReadFile(fsys, "d07/f00007")
		require.NoError(t, err)
		damage.do(t, idxs[0])
		c = mustHash(repo.Commit(t, damage.name, gittest.File(fmt.Sprintf("d01/new%d", i), "x")))
		_, err = fs.ReadFile(fsys, "d99/f39999")
		require.ErrorIs(t, err, ErrCorrupt, damage.name)
		require.ErrorIs(t, err, damage.err, damage.name)
		res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
		require.NoError(t, err)
		require.ErrorContains(t, res.Rebuilt, "cut short", damage.name)
		fsys, err = m.FS(c, at(""))
		require.NoError(t, err)
		data, err := fs.ReadFile(fsys, "d99/f39999")
		require.NoError(t, err)
		require.Equal(t, "39999", string(data))
		data, err = fs.ReadFile(fsys, fmt.Sprintf("d01/new%d", i))
		require.NoError(t, err)
		require.Equal(t, "x", string(data))
	}
}

// fanoutPastTheIndex rewrites the fanout of the index at idx in place:
// still ascending, but counting far past the index (the file keeps its
// size).
func fanoutPastTheIndex(t *testing.T, idx string) {
	f, err := os.OpenFile(idx, os.O_WRONLY, 0)
	require.NoError(t, err)
	fanout := make([]byte, packidx.FanoutSize)
	for b := range 256 {
		binary.BigEndian.PutUint32(fanout[4*b:], 1<<30+uint32(b))
	}
	_, err = f.WriteAt(fanout, packidx.HeaderSize)
	require.NoError(t, errors.Join(err, f.Close()))
}
