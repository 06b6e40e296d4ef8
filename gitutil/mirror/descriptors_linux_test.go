//go:build linux

package mirror

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// openIn counts this process's open files under dir.
func openIn(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, dir) {
			n++
		}
	}
	return n
}

// A watcher of many remotes keeps a mirror open for each: between its
// operations a mirror holds no file open (a file system holds a few until
// closed).
func TestMirrorHoldsNoFilesBetweenOperations(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{})
	require.NoError(t, err)
	var commits []gitutil.Hash
	for i := range 3 {
		c := repo.Commit(t, "c", gittest.File("a/x", string(rune('0'+i))))
		res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
		require.NoError(t, err)
		require.Equal(t, c, res.Refs["refs/heads/main"].String())
		commits = append(commits, mustHash(c))
	}
	_, err = m.TreeHash(ctxT(t), commits[2], at("a"))
	require.NoError(t, err)
	_, err = m.ChangedPaths(ctxT(t), commits[0], commits[2], at("a"))
	require.NoError(t, err)
	anc, err := m.IsAncestor(ctxT(t), commits[0], commits[2])
	require.NoError(t, err)
	assert.True(t, anc)
	assert.Zero(t, openIn(t, dir), "files open after the mirror's operations")

	fsys, err := m.FS(commits[2], at("a"))
	require.NoError(t, err)
	f, err := fsys.Open("x")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, fsys.(interface{ Close() error }).Close())
	assert.Zero(t, openIn(t, dir), "files open after a file system was closed")
}
