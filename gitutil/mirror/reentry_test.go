package mirror

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// A pack whose index cannot be read, found when a file system is made,
// fails that FS; the mirror is not left locked.
func TestAPackWithoutIndexFoundByFSDoesNotLockTheMirror(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := mustHash(repo.Commit(t, "1", gittest.File("f", "1")))
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	_, err = m.FS(c, at(""))
	require.NoError(t, err)
	bogus := filepath.Join(dir, "objects", "pack", "pack-"+strings.Repeat("ab", 20)+".pack")
	require.NoError(t, os.WriteFile(bogus, []byte("PACK"), 0o644))

	gittest.ReturnsWithin(t, "FS", func() { _, err = m.FS(c, at("")) })
	require.Error(t, err)
	var has atomic.Bool
	gittest.ReturnsWithin(t, "HasCommit after it", func() { has.Store(m.HasCommit(c)) })
}

// OnDamage is the program's code: called with no lock of the mirror or of
// the file system that found the damage, it may read the mirror (here, as
// a program would ask whether the commit is still there).
func TestAnOnDamageThatReadsTheMirrorDoesNotDeadlockIt(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	var files []gittest.Change
	for i := range 50 {
		files = append(files, gittest.File(filepath.Join("d", string(rune('a'+i%26))+string(rune('a'+i/26))), strings.Repeat(string(rune('a'+i%26)), 4000)))
	}
	c := mustHash(repo.Commit(t, "1", files...))
	dir := t.TempDir()
	var m *Mirror
	var damaged, had atomic.Int32
	m, err := Open(dir, repo.URL(), Options{OnDamage: func(error) {
		damaged.Add(1)
		if m.HasCommit(c) {
			had.Add(1)
		}
	}})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	fsys, err := m.FS(c, at(""))
	require.NoError(t, err)

	cutPacks(t, dir)
	var readErr error
	gittest.ReturnsWithin(t, "reading a damaged store", func() {
		for _, name := range []string{"d/aa", "d/xb", "d/ab"} {
			if _, readErr = fs.ReadFile(fsys, name); readErr != nil {
				return
			}
		}
	})
	require.ErrorIs(t, readErr, ErrCorrupt)
	require.EqualValues(t, 1, damaged.Load())
	require.Zero(t, had.Load(), "a damaged mirror has nothing")
}

// OnFallback is the program's code: called once the fetch let the
// mirror's lock go, it may read the mirror.
func TestAnOnFallbackThatReadsTheMirrorDoesNotDeadlockIt(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := mustHash(repo.Commit(t, "1", gittest.File("f", "1")))
	failing := filepath.Join(t.TempDir(), "git")
	require.NoError(t, os.WriteFile(failing, []byte("#!/bin/sh\nexit 1\n"), 0o755))
	var m *Mirror
	var fellBack atomic.Int32
	m, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: failing, OnFallback: func(error) {
		m.HasCommit(c)
		fellBack.Add(1)
	}})
	require.NoError(t, err)
	gittest.ReturnsWithin(t, "a fetch whose git fails", func() { _, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"}) })
	require.NoError(t, err)
	require.Positive(t, fellBack.Load(), "go-git stood in, and said so")
	require.True(t, m.HasCommit(c))
}

// A trace of what links read is the program's code: called once the file
// system let its lock go, it may read the file system.
func TestATraceThatReadsTheFileSystemDoesNotDeadlockIt(t *testing.T) {
	m, c := linkedRepo(t)
	fsys, err := m.FS(c, at(""))
	require.NoError(t, err)
	var paths []string
	fsys.(LinkTracer).TraceLinks(func(p string) {
		if _, err := fs.Stat(fsys, "apps/x/plain.yaml"); err == nil {
			paths = append(paths, p)
		}
	})
	gittest.ReturnsWithin(t, "a read through a link", func() { _, err = fs.ReadFile(fsys, "apps/x/values.yaml") })
	require.NoError(t, err)
	require.Equal(t, []string{"apps/x/values.yaml", "common/values.yaml"}, paths)
}
