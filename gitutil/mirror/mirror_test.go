package mirror

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// mustHash is gitutil.ParseHash for a name a test knows to be valid.
func mustHash(s string) gitutil.Hash {
	h, err := gitutil.ParseHash(s)
	if err != nil {
		panic(err)
	}
	return h
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// at is the selection of a plain path.
func at(p string) Selection { return Selection{Path: p} }

func TestMirrorIncrementalFetchAndTreeQueries(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one",
		gittest.File("apps/a/deploy.yaml", "a1"),
		gittest.File("apps/b/deploy.yaml", "b1"),
		gittest.File("README", "hi"))

	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.True(t, res.Fetched)
	assert.Nil(t, res.Rebuilt)
	assert.Equal(t, c1, res.Refs["refs/heads/main"].String())

	// Nothing moved: the fetch transfers nothing.
	res, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.False(t, res.Fetched)

	c2 := repo.Commit(t, "two", gittest.File("apps/b/deploy.yaml", "b2"), gittest.File("README", "hello"))
	res, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.True(t, res.Fetched)
	assert.Equal(t, c2, res.Refs["refs/heads/main"].String())

	h1, h2 := mustHash(c1), mustHash(c2)
	before := m.TreesRead()
	ta1, err := m.TreeHash(ctxT(t), h1, at("apps/a"))
	// The root and apps: a path check reads the trees above the path, not
	// the one it names (its hash is in its parent).
	assert.Equal(t, int64(2), m.TreesRead()-before)
	require.NoError(t, err)
	ta2, err := m.TreeHash(ctxT(t), h2, at("apps/a/"))
	require.NoError(t, err)
	assert.Equal(t, ta1, ta2, "apps/a is untouched by c2")
	tb1, _ := m.TreeHash(ctxT(t), h1, at("apps/b"))
	tb2, _ := m.TreeHash(ctxT(t), h2, at("./apps/b"))
	assert.NotEqual(t, tb1, tb2)

	_, err = m.TreeHash(ctxT(t), h2, at("nope"))
	require.ErrorIs(t, err, ErrPathNotFound)
	_, err = m.TreeHash(ctxT(t), h2, at("../etc"))
	require.ErrorIs(t, err, ErrInvalidPath)

	paths, err := m.ChangedPaths(ctxT(t), h1, h2, at("apps"))
	require.NoError(t, err)
	assert.Equal(t, []string{"b/deploy.yaml"}, paths)
	paths, err = m.ChangedPaths(ctxT(t), h1, h2, at(""))
	require.NoError(t, err)
	assert.Equal(t, []string{"README", "apps/b/deploy.yaml"}, paths)
	paths, err = m.ChangedPaths(ctxT(t), h1, h2, at("apps/a"))
	require.NoError(t, err)
	assert.Empty(t, paths)

	ok, err := m.IsAncestor(ctxT(t), h1, h2)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = m.IsAncestor(ctxT(t), h2, h1)
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestMirrorFullHistoryAnswersAncestry(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	base := repo.Commit(t, "base", gittest.File("a", "1"), gittest.File("b", "old blob"))
	old := repo.Commit(t, "old", gittest.File("a", "2"), gittest.File("b", "changed"))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)

	repo.Reset(t, base)
	rewritten := repo.Commit(t, "rewritten", gittest.File("a", "3"))
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	ok, err := m.IsAncestor(ctxT(t), mustHash(old), mustHash(rewritten))
	require.NoError(t, err)
	assert.False(t, ok, "a force-push is told apart")
	ok, err = m.IsAncestor(ctxT(t), mustHash(base), mustHash(rewritten))
	require.NoError(t, err)
	assert.True(t, ok)

	// The rewritten history brings back a blob only older commits had.
	fsys, err := m.FS(mustHash(rewritten), at(""))
	require.NoError(t, err)
	data, err := fs.ReadFile(fsys, "b")
	require.NoError(t, err)
	assert.Equal(t, "old blob", string(data))
}

func TestShallowMirror(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	base := repo.Commit(t, "base", gittest.File("a", "1"))
	old := repo.Commit(t, "old", gittest.File("a", "2"))
	m, err := Open(t.TempDir(), repo.URL(), Options{FirstFetchDepth: 1})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)

	repo.Reset(t, base)
	rewritten := repo.Commit(t, "rewritten", gittest.File("a", "3"))
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.Equal(t, rewritten, res.Refs["refs/heads/main"].String())

	// A shallow mirror cannot tell.
	ok, err := m.IsAncestor(ctxT(t), mustHash(old), mustHash(rewritten))
	require.ErrorIs(t, err, ErrHistoryIncomplete)
	assert.False(t, ok)

	// A normal push after a shallow first fetch is found to descend.
	next := repo.Commit(t, "next", gittest.File("a", "4"))
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	ok, err = m.IsAncestor(ctxT(t), mustHash(rewritten), mustHash(next))
	require.NoError(t, err)
	assert.True(t, ok)
	paths, err := m.ChangedPaths(ctxT(t), mustHash(old), mustHash(next), at(""))
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, paths)
}

func TestMirrorTagsAndCommits(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a", "1"))
	repo.Tag(t, "v1", true)
	c2 := repo.Commit(t, "two", gittest.File("a", "2"))
	repo.Commit(t, "three", gittest.File("a", "3"))
	m, err := Open(t.TempDir(), repo.URL(), Options{FirstFetchDepth: 1})
	require.NoError(t, err)
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/tags/v1"})
	require.NoError(t, err)
	assert.Equal(t, c1, res.Refs["refs/tags/v1"].String(), "annotated tag peeled to its commit")

	assert.False(t, m.HasCommit(mustHash(c2)))
	res, err = m.FetchCommit(ctxT(t), nil, mustHash(c2))
	require.NoError(t, err)
	assert.True(t, res.Fetched)
	assert.True(t, m.HasCommit(mustHash(c2)))
}

func TestMirrorRebuildsAfterStaleLockAndCorruption(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a", "1"))
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)

	// A crash left a lock file behind.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "packed-refs.lock"), nil, 0o644))
	m, err = Open(dir, repo.URL(), Options{})
	require.NoError(t, err)
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.Error(t, res.Rebuilt)
	assert.Contains(t, res.Rebuilt.Error(), "packed-refs.lock")
	assert.Equal(t, c1, res.Refs["refs/heads/main"].String())
	assert.NoFileExists(t, filepath.Join(dir, "packed-refs.lock"))

	// Every pack is truncated: reads fail, the next fetch rebuilds.
	packs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.pack"))
	require.NoError(t, err)
	require.NotEmpty(t, packs)
	for _, p := range packs {
		require.NoError(t, os.WriteFile(p, []byte("PACK garbage"), 0o644))
	}
	m, err = Open(dir, repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.TreeHash(ctxT(t), mustHash(c1), at(""))
	require.Error(t, err)
	t.Log(err)
	res, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.Error(t, res.Rebuilt, "a corrupt store is rebuilt")
	_, err = m.TreeHash(ctxT(t), mustHash(c1), at(""))
	require.NoError(t, err)
}

func TestFS(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := repo.Commit(t, "tree",
		gittest.File("app/deploy.yaml", "kind: Deployment\n"),
		gittest.File("app/sub/cm.yaml", "kind: ConfigMap\n"),
		gittest.Symlink("app/link.yaml", "sub/cm.yaml"),
		gittest.Symlink("app/sub/up.yaml", "../deploy.yaml"),
		gittest.Symlink("app/escape", "../secret.txt"),
		gittest.Symlink("app/abs", "/etc/passwd"),
		gittest.Symlink("app/loop", "loop"),
		gittest.File("secret.txt", "outside"))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)

	fsys, err := m.FS(mustHash(c), at("app"))
	require.NoError(t, err)

	data, err := fs.ReadFile(fsys, "link.yaml")
	require.NoError(t, err)
	assert.Equal(t, "kind: ConfigMap\n", string(data))
	data, err = fs.ReadFile(fsys, "sub/up.yaml")
	require.NoError(t, err)
	assert.Equal(t, "kind: Deployment\n", string(data))

	for _, name := range []string{"escape", "abs"} {
		_, err = fs.ReadFile(fsys, name)
		require.ErrorIs(t, err, ErrSymlinkEscape, name)
		_, err = fsys.(fs.ReadLinkFS).ReadLink(name)
		require.ErrorIs(t, err, ErrSymlinkEscape, name)
	}
	_, err = fs.ReadFile(fsys, "loop")
	require.Error(t, err)
	_, err = fs.ReadFile(fsys, "../secret.txt")
	require.ErrorIs(t, err, fs.ErrInvalid)

	target, err := fsys.(fs.ReadLinkFS).ReadLink("link.yaml")
	require.NoError(t, err)
	assert.Equal(t, "sub/cm.yaml", target)
	fi, err := fsys.(fs.ReadLinkFS).Lstat("link.yaml")
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSymlink, fi.Mode().Type())

	var files []string
	require.NoError(t, fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	}))
	assert.Equal(t, []string{"deploy.yaml", "sub/cm.yaml"}, files)

	// The standard conformance checks, on a tree with no symlinks.
	plain, err := m.FS(mustHash(c), at("app/sub/../sub"))
	require.Error(t, err, "'..' is rejected even when it would stay inside")
	require.ErrorIs(t, err, ErrInvalidPath)
	_ = plain
	c2 := repo.Commit(t, "plain", gittest.Delete("app"), gittest.File("app/x/y.txt", "y"), gittest.File("app/z.txt", "z"))
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	plain, err = m.FS(mustHash(c2), at("app"))
	require.NoError(t, err)
	require.NoError(t, fstest.TestFS(plain, "x/y.txt", "z.txt"))

	_, err = m.FS(mustHash(c2), at("app/z.txt"))
	require.ErrorIs(t, err, ErrPathNotFound, "a file is not a tree")
}

// Links chain: "d -> ." makes "d/d/d/../../.." climb three directories
// from where the link stands, though the text of each link alone reads as
// inside (Argo CD's CVE-2022-24904). The file system judges a link by
// where the operating system would land in a checkout.
func TestFSSymlinkChainsResolvedPhysically(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	climb := "d/d/d/d/d/d/d/d/../../../../../../../../../../../../etc/passwd"
	c := repo.Commit(t, "attack",
		gittest.File("deploy/app.yaml", "app"),
		gittest.File("deploy/sub/x.yaml", "x"),
		gittest.File("outside.txt", "outside"),
		gittest.Symlink("deploy/d", "."),
		gittest.Symlink("deploy/evil", climb),
		gittest.Symlink("deploy/up", "d/../outside.txt"),
		gittest.Symlink("deploy/s", "sub"),
		gittest.Symlink("deploy/back", "s/../../outside.txt"),
		gittest.Symlink("deploy/fine", "d/d/sub/../app.yaml"),
		gittest.Symlink("deploy/dangling-out", "missing/../../../x"),
		gittest.Symlink("deploy/dangling-in", "missing.yaml"))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	fsys, err := m.FS(mustHash(c), at("deploy"))
	require.NoError(t, err)
	rl := fsys.(fs.ReadLinkFS)

	for _, name := range []string{"evil", "up", "back", "d/evil", "d/d/up"} {
		_, err := fs.ReadFile(fsys, name)
		require.ErrorIs(t, err, ErrSymlinkEscape, name)
		_, err = rl.ReadLink(name)
		require.ErrorIs(t, err, ErrSymlinkEscape, name)
		_, err = fs.Stat(fsys, name)
		require.ErrorIs(t, err, ErrSymlinkEscape, name)
	}
	_, err = rl.ReadLink("dangling-out")
	require.ErrorIs(t, err, ErrSymlinkEscape, "a dangling link whose text leaves the tree")

	data, err := fs.ReadFile(fsys, "fine")
	require.NoError(t, err)
	assert.Equal(t, "app", string(data))
	data, err = fs.ReadFile(fsys, "d/d/s/x.yaml")
	require.NoError(t, err)
	assert.Equal(t, "x", string(data))
	target, err := rl.ReadLink("dangling-in")
	require.NoError(t, err)
	assert.Equal(t, "missing.yaml", target)
}
