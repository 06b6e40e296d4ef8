//go:build unix

package gitutil

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/gittest"
)

// An index of 1 MiB or more is mapped; its file cut short under the
// mapping (another process, a failing disk) makes a read of the pages
// past the new end fault. That is an error of the lookup, never a SIGBUS
// that ends the program, and the damage decision verifies it.
func TestMappedIndexCutShortIsAnError(t *testing.T) {
	data := syntheticIndex(t, 40_000, 1000)
	require.GreaterOrEqual(t, len(data), mapThreshold)
	p := filepath.Join(t.TempDir(), "pack.idx")
	require.NoError(t, os.WriteFile(p, data, 0o644))
	idx, err := openPackIndex(p, plumbing.NewHash("0123456789012345678901234567890123456789"))
	require.NoError(t, err)
	require.True(t, idx.mapped)
	var last plumbing.Hash
	copy(last[:], idx.name(idx.count-1))
	_, err = idx.FindOffset(last)
	require.NoError(t, err)

	require.NoError(t, os.Truncate(p, 4096))
	_, err = idx.FindOffset(last)
	require.ErrorIs(t, err, errIndexFault)
	_, err = idx.Contains(last)
	require.ErrorIs(t, err, errIndexFault)
	_, err = idx.FindCRC32(last)
	require.ErrorIs(t, err, errIndexFault)
	_, err = idx.FindHash(12)
	require.ErrorIs(t, err, errIndexFault)
	it, err := idx.Entries()
	require.NoError(t, err)
	for err == nil {
		_, err = it.Next()
	}
	require.ErrorIs(t, err, errIndexFault)
	assert.False(t, debug.SetPanicOnFault(false), "the goroutine's setting is restored")
	assert.Error(t, judge(err, func() error { return checkPacksFile(p) }), "verified, and damage")
}

// checkPacksFile is the index check the store's verification makes, on one
// index file.
func checkPacksFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, _, err = verifyIndex(f)
	return err
}

// The whole of it, on a mirror: a repository of 40,000 files (an index of
// 1.1 MB, mapped), its index cut short under a file system that reads it,
// and a commit pushed: the read is an error (the mirror marked damaged),
// and the next fetch rebuilds the mirror and delivers the new commit.
func TestMirrorHealsAMappedIndexCutShort(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/big")
	var files []gittest.Change
	for i := range 40000 {
		files = append(files, gittest.File(fmt.Sprintf("d%02d/f%05d", i%100, i), fmt.Sprint(i)))
	}
	c := plumbing.NewHash(repo.Commit(t, "big", files...))
	dir := t.TempDir()
	m, err := OpenMirror(dir, repo.URL(), MirrorOptions{GitCLI: "git"})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	idxs, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.idx"))
	require.Len(t, idxs, 1)
	st, err := os.Stat(idxs[0])
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Size(), int64(mapThreshold), "mapped")
	fsys, err := m.FS(c, at(""))
	require.NoError(t, err)
	_, err = fs.ReadFile(fsys, "d07/f00007")
	require.NoError(t, err)
	require.NoError(t, os.Truncate(idxs[0], 8192))
	c2 := plumbing.NewHash(repo.Commit(t, "next", gittest.File("d01/new", "x")))
	_, err = fs.ReadFile(fsys, "d99/f39999")
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, err, errIndexFault)
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.ErrorContains(t, res.Rebuilt, "cut short")
	fsys, err = m.FS(c2, at(""))
	require.NoError(t, err)
	data, err := fs.ReadFile(fsys, "d99/f39999")
	require.NoError(t, err)
	require.Equal(t, "39999", string(data))
}
