package mirror

import (
	"io/fs"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// partialRepo is a repository of two directories, one of them with a
// large file, served by a server that allows filters unless told not to.
func partialRepo(t *testing.T) (*gittest.Server, *gittest.Repo, string) {
	t.Helper()
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "mono/repo")
	c := repo.Commit(t, "one",
		gittest.File("apps/a/cm.yaml", "a: 1\n"), gittest.File("apps/a/deploy.yaml", "d: 1\n"),
		gittest.File("other/big.bin", strings.Repeat("x", 256<<10)), gittest.File("README", "hi\n"))
	return srv, repo, c
}

func partialMirror(t *testing.T, url string, opts Options) *Mirror {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err)
	opts.GitCLI, opts.Partial = gitBin, true
	m, err := Open(t.TempDir(), url, opts)
	require.NoError(t, err)
	return m
}

// listedMain lists the repository's main branch, as a watcher's poll does,
// with m's lister.
func listedMain(t *testing.T, m *Mirror, repo *gittest.Repo, auth *gitutil.Auth) map[string]gitutil.Hash {
	t.Helper()
	refs, err := m.lister.ListRefs(ctxT(t), repo.URL(), auth, []string{"refs/heads/"})
	require.NoError(t, err)
	return map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"]}
}

// has reports whether the mirror holds the blob at path in commit.
func has(t *testing.T, m *Mirror, commit, path string) bool {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.entryAt(plumbing.NewHash(commit), path)
	require.NoError(t, err, path)
	return m.repo.Storer.HasEncodedObject(e.Hash) == nil
}

// A partial mirror's fetch brings commits and trees, not files: the paths
// a target reads come with FetchPaths, in one request, and its file
// system then reads them without asking the remote again. The files of
// other paths stay on the server, and what is bought is small.
func TestPartialMirrorHoldsThePathsFilesOnly(t *testing.T) {
	_, repo, c := partialRepo(t)
	m := partialMirror(t, repo.URL(), Options{})
	res, err := m.FetchListed(ctxT(t), nil, listedMain(t, m, repo, nil))
	require.NoError(t, err)
	assert.True(t, res.Fetched)
	assert.True(t, m.Partial())
	assert.True(t, m.HasCommit(mustHash(c)))
	assert.Less(t, repo.Counts().FetchBytes.Load(), int64(16<<10), "no file came with the commits")
	for _, p := range []string{"apps/a/cm.yaml", "other/big.bin", "README"} {
		assert.False(t, has(t, m, c, p), p)
	}
	// Trees are whole: what the watcher asks before it delivers needs no
	// file.
	_, err = m.TreeHash(ctxT(t), mustHash(c), Selection{Path: "apps/a"})
	require.NoError(t, err)

	fetches := repo.Counts().Fetches.Load()
	require.NoError(t, m.FetchPaths(ctxT(t), nil, mustHash(c), []string{"apps/a"}))
	assert.Equal(t, fetches+1, repo.Counts().Fetches.Load(), "one request for the path's files")
	assert.True(t, has(t, m, c, "apps/a/cm.yaml"))
	assert.True(t, has(t, m, c, "apps/a/deploy.yaml"))
	assert.False(t, has(t, m, c, "other/big.bin"), "not under the path")
	assert.Less(t, repo.Counts().FetchBytes.Load(), int64(32<<10))

	fsys, err := m.FS(mustHash(c), Selection{Path: "apps/a"})
	require.NoError(t, err)
	data, err := fs.ReadFile(fsys, "cm.yaml")
	require.NoError(t, err)
	assert.Equal(t, "a: 1\n", string(data))
	_, err = fs.Stat(fsys, "deploy.yaml")
	require.NoError(t, err)
	assert.Equal(t, fetches+1, repo.Counts().Fetches.Load(), "the path's file system reads what the mirror has")

	// Nothing missing: no request.
	require.NoError(t, m.FetchPaths(ctxT(t), nil, mustHash(c), []string{"apps/a", "apps/a/cm.yaml"}))
	assert.Equal(t, fetches+1, repo.Counts().Fetches.Load())
}

// A file outside the paths (a kustomize base read through the whole
// repository) is fetched when it is read, with the mirror's credentials,
// and read the same.
func TestPartialMirrorFetchesAFileWhenRead(t *testing.T) {
	srv, repo, c := partialRepo(t)
	srv.SetBasicAuth("u", "p")
	auth := &gitutil.Auth{Username: "u", Password: "p", AllowInsecureHTTP: true}
	m := partialMirror(t, repo.URL(), Options{})
	_, err := m.FetchListed(ctxT(t), auth, listedMain(t, m, repo, auth))
	require.NoError(t, err)
	root, err := m.FS(mustHash(c), Selection{})
	require.NoError(t, err)
	fi, err := fs.Stat(root, "other/big.bin")
	require.NoError(t, err)
	assert.EqualValues(t, 256<<10, fi.Size())
	data, err := fs.ReadFile(root, "README")
	require.NoError(t, err)
	assert.Equal(t, "hi\n", string(data))
	assert.True(t, has(t, m, c, "README"))
	assert.False(t, has(t, m, c, "apps/a/cm.yaml"), "only what was read")
}

// A file that cannot be fetched when read (the remote is down) is the
// remote's error, ErrNotFetched: the mirror is not damaged, and the same
// read succeeds once the remote is back.
func TestPartialMirrorUnfetchedFileIsNotDamage(t *testing.T) {
	srv, repo, c := partialRepo(t)
	var damaged atomic.Int32
	m := partialMirror(t, repo.URL(), Options{OnDamage: func(error) { damaged.Add(1) }})
	_, err := m.FetchListed(ctxT(t), nil, listedMain(t, m, repo, nil))
	require.NoError(t, err)
	root, err := m.FS(mustHash(c), Selection{})
	require.NoError(t, err)
	srv.SetDown(true)
	_, err = fs.ReadFile(root, "README")
	require.ErrorIs(t, err, ErrNotFetched)
	assert.NotErrorIs(t, err, ErrCorrupt)
	err = m.FetchPaths(ctxT(t), nil, mustHash(c), []string{"apps"})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrCorrupt)
	assert.Zero(t, damaged.Load())
	srv.SetDown(false)
	data, err := fs.ReadFile(root, "README")
	require.NoError(t, err)
	assert.Equal(t, "hi\n", string(data))
	assert.True(t, m.HasCommit(mustHash(c)), "the mirror was not rebuilt")
}

// Later fetches stay filtered: a commit that changes files in and out of
// the path brings no file; FetchPaths then brings the path's new ones
// only. Many fetches are repacked by the git CLI, which takes the files
// the mirror lacks for promised by the remote; the mirror reads the same
// after, and is still partial when opened again.
func TestPartialMirrorStaysPartial(t *testing.T) {
	_, repo, c1 := partialRepo(t)
	dir := t.TempDir()
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err)
	opts := Options{GitCLI: gitBin, Partial: true, RepackPacks: 2}
	m, err := Open(dir, repo.URL(), opts)
	require.NoError(t, err)
	_, err = m.FetchListed(ctxT(t), nil, listedMain(t, m, repo, nil))
	require.NoError(t, err)
	require.NoError(t, m.FetchPaths(ctxT(t), nil, mustHash(c1), []string{"apps/a"}))
	repacked := false
	var c string
	for i := range 4 {
		c = repo.Commit(t, "next", gittest.File("apps/a/cm.yaml", strings.Repeat("a", i+2)+"\n"), gittest.File("other/big.bin", strings.Repeat("y", 100<<10+i)))
		before := repo.Counts().FetchBytes.Load()
		res, err := m.FetchListed(ctxT(t), nil, listedMain(t, m, repo, nil))
		require.NoError(t, err)
		require.NoError(t, res.RepackErr)
		repacked = repacked || res.Repacked
		assert.Less(t, repo.Counts().FetchBytes.Load()-before, int64(8<<10), "fetch %d brought no file", i)
		assert.False(t, has(t, m, c, "apps/a/cm.yaml"))
		require.NoError(t, m.FetchPaths(ctxT(t), nil, mustHash(c), []string{"apps/a"}))
		assert.True(t, has(t, m, c, "apps/a/cm.yaml"))
		assert.False(t, has(t, m, c, "other/big.bin"))
	}
	assert.True(t, repacked, "the git CLI repacked the partial mirror")
	fsys, err := m.FS(mustHash(c), Selection{Path: "apps/a"})
	require.NoError(t, err)
	data, err := fs.ReadFile(fsys, "cm.yaml")
	require.NoError(t, err)
	assert.Equal(t, "aaaaa\n", string(data))

	again, err := Open(dir, repo.URL(), opts)
	require.NoError(t, err)
	assert.True(t, again.Partial())
	again2, err := Open(dir, repo.URL(), Options{GitCLI: gitBin})
	require.NoError(t, err)
	assert.True(t, again2.Partial(), "a partial mirror stays partial without the option: it lacks files")
}

// Where a partial mirror cannot be (the remote refuses filters, speaks
// version 0 only, or there is no git CLI to repack it), the mirror is
// full, without an error, and has every file.
func TestPartialMirrorFallsBackToFull(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		setup func(*gittest.Server)
		cli   string
	}{
		{"filters refused", func(s *gittest.Server) { s.SetFilters(false) }, gitBin},
		{"version 0 only", func(s *gittest.Server) { s.SetV0Only(true) }, gitBin},
		{"no git CLI", func(*gittest.Server) {}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, repo, c := partialRepo(t)
			tc.setup(srv)
			m, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: tc.cli, Partial: true})
			require.NoError(t, err)
			_, err = m.FetchListed(ctxT(t), nil, listedMain(t, m, repo, nil))
			require.NoError(t, err)
			assert.False(t, m.Partial())
			for _, p := range []string{"apps/a/cm.yaml", "other/big.bin", "README"} {
				assert.True(t, has(t, m, c, p), p)
			}
			fetches := repo.Counts().Fetches.Load()
			require.NoError(t, m.FetchPaths(ctxT(t), nil, mustHash(c), []string{"apps/a"}))
			assert.Equal(t, fetches, repo.Counts().Fetches.Load(), "a full mirror has the files")
		})
	}
}

// A mirror that lacks a file it should hold is damaged when it is full,
// as before: only a partial mirror fetches what it lacks.
func TestFullMirrorMissingFileIsDamage(t *testing.T) {
	var why error
	assert.NoError(t, judge(ErrNotFetched, func() error { return nil }))
	why = judge(plumbing.ErrObjectNotFound, func() error { return nil })
	assert.Error(t, why)
}

// The roots of a selection stay under its Path: a ".." in Paths is left
// out, not cleaned away into a path outside it.
func TestSelectionRoots(t *testing.T) {
	for _, tc := range []struct {
		sel  Selection
		want []string
	}{
		{Selection{}, []string{""}},
		{Selection{Path: "/apps/a/"}, []string{"apps/a"}},
		{Selection{Path: "apps", Paths: []string{"a", "b/c.yaml", "/d/"}}, []string{"apps/a", "apps/b/c.yaml", "apps/d"}},
		{Selection{Path: "apps", Paths: []string{"../secrets", "a/../../x", "ok"}}, []string{"apps/ok"}},
		{Selection{Paths: []string{"x"}}, []string{"x"}},
		{Selection{Path: "../up"}, nil},
	} {
		assert.Equal(t, tc.want, tc.sel.Roots(), "%+v", tc.sel)
	}
}

// A partial mirror's first fetch brings the commits only: most of what a
// repository of wide directories holds is its history of trees. A
// commit's trees come at once when it is first read (a tree is fetched
// with the trees under it), for an old commit too, and what it asks of
// the history (ancestry, the paths changed) is answered.
func TestPartialMirrorFetchesTreesWhenRead(t *testing.T) {
	_, repo, c1 := partialRepo(t)
	c2 := repo.Commit(t, "two", gittest.File("apps/a/cm.yaml", "a: 2\n"))
	m := partialMirror(t, repo.URL(), Options{})
	_, err := m.FetchListed(ctxT(t), nil, listedMain(t, m, repo, nil))
	require.NoError(t, err)
	root := func(c string) plumbing.Hash {
		m.mu.Lock()
		defer m.mu.Unlock()
		co, err := m.repo.CommitObject(plumbing.NewHash(c)) // reads the commit, not its tree
		require.NoError(t, err)
		return co.TreeHash
	}
	holds := func(h plumbing.Hash) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.repo.Storer.HasEncodedObject(h) == nil
	}
	assert.False(t, holds(root(c2)), "no tree with the commits")
	assert.False(t, holds(root(c1)))
	fetches := repo.Counts().Fetches.Load()
	paths, err := m.ChangedPaths(ctxT(t), mustHash(c1), mustHash(c2), Selection{Path: "apps"})
	require.NoError(t, err)
	assert.Equal(t, []string{"a/cm.yaml"}, paths)
	assert.True(t, holds(root(c1)))
	assert.True(t, holds(root(c2)))
	assert.Equal(t, fetches+2, repo.Counts().Fetches.Load(), "one request per commit read, its trees all at once")
	anc, err := m.IsAncestor(ctxT(t), mustHash(c1), mustHash(c2))
	require.NoError(t, err)
	assert.True(t, anc)
	assert.False(t, has(t, m, c2, "apps/a/cm.yaml"), "trees, not files")
}
