package mirror

import (
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// After a listing, a fetch of what it named is one request: no second
// ref advertisement. A tag is set to its tag object, as upstream has it.
func TestFetchListedIsOneRequest(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	// A file large enough that its next version is a delta on this one,
	// which the mirror has: the pack must not be thin.
	big := strings.Repeat("line of a manifest that stays the same\n", 200)
	repo.Commit(t, "one", gittest.File("a", "1"), gittest.File("big.yaml", big))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)

	two := repo.Commit(t, "two", gittest.File("a", "2"), gittest.File("big.yaml", big+"one more line\n"))
	repo.Tag(t, "v2", true)
	refs, err := gitutil.ListRefs(ctxT(t), repo.URL(), nil, nil)
	require.NoError(t, err)
	lists, fetches := repo.Counts().Lists.Load(), repo.Counts().Fetches.Load()
	listed := map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"], "refs/tags/v2": refs.Refs["refs/tags/v2"]}
	res, err := m.FetchListed(ctxT(t), nil, listed)
	require.NoError(t, err)
	assert.True(t, res.Fetched)
	assert.Equal(t, two, res.Refs["refs/heads/main"].String())
	assert.Equal(t, two, res.Refs["refs/tags/v2"].String(), "peeled for the caller")
	assert.Equal(t, lists, repo.Counts().Lists.Load(), "no ref advertisement")
	assert.Equal(t, fetches+1, repo.Counts().Fetches.Load(), "one upload-pack request")
	ref, err := m.repo.Reference("refs/tags/v2", false)
	require.NoError(t, err)
	assert.Equal(t, refs.Refs["refs/tags/v2"], gitutil.Hash(ref.Hash()), "the tag ref names the tag object")
	assert.True(t, m.HasCommit(mustHash(two)))

	// Nothing new: no request at all.
	res, err = m.FetchListed(ctxT(t), nil, listed)
	require.NoError(t, err)
	assert.False(t, res.Fetched)
	assert.Equal(t, fetches+1, repo.Counts().Fetches.Load())
}

// An object the server will not send (here one it never had; in life a
// ref that moved and was collected since the listing) makes the one
// request fail: the fetch is made the usual way, at the ref's commit now.
func TestFetchListedFallsBack(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "one", gittest.File("a", "1"))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)

	now := repo.Commit(t, "two", gittest.File("a", "2"))
	fetches := repo.Counts().Fetches.Load()
	res, err := m.FetchListed(ctxT(t), nil, map[string]gitutil.Hash{"refs/heads/main": mustHash(strings.Repeat("ab", 20))})
	require.NoError(t, err)
	assert.Equal(t, now, res.Refs["refs/heads/main"].String())
	assert.Equal(t, fetches+2, repo.Counts().Fetches.Load(), "the refused request, then the usual fetch")
}

// Where one request cannot do (an empty mirror), FetchListed is Fetch.
func TestFetchListedIntoAnEmptyMirror(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	one := repo.Commit(t, "one", gittest.File("a", "1"))
	refs, err := gitutil.ListRefs(ctxT(t), repo.URL(), nil, nil)
	require.NoError(t, err)
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	res, err := m.FetchListed(ctxT(t), nil, map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"]})
	require.NoError(t, err)
	assert.Equal(t, one, res.Refs["refs/heads/main"].String())
}

// Over HTTPS the one request trusts what the target's Auth trusts.
func TestFetchListedOverTLS(t *testing.T) {
	srv := gittest.NewTLSServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "one", gittest.File("a", "1"))
	auth := &gitutil.Auth{CABundle: srv.CACert()}
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), auth, []string{"refs/heads/main"})
	require.NoError(t, err)
	two := repo.Commit(t, "two", gittest.File("a", "2"))
	refs, err := gitutil.ListRefs(ctxT(t), repo.URL(), auth, nil)
	require.NoError(t, err)
	fetches := repo.Counts().Fetches.Load()
	res, err := m.FetchListed(ctxT(t), auth, map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"]})
	require.NoError(t, err)
	assert.Equal(t, two, res.Refs["refs/heads/main"].String())
	assert.Equal(t, fetches+1, repo.Counts().Fetches.Load(), "one request, trusted")
}

// A delivery's new tree is the next delivery's old tree: the path diff of
// the next commit decodes only the new one (and the roots above).
func TestChangedPathsKeepsTheLastTrees(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("apps/a", "1"), gittest.File("apps/b", "1"))
	c2 := repo.Commit(t, "two", gittest.File("apps/a", "2"))
	c3 := repo.Commit(t, "three", gittest.File("apps/b", "3"))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	h := mustHash
	paths, err := m.ChangedPaths(ctxT(t), h(c1), h(c2), at("apps"))
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, paths)
	before := m.TreesRead()
	paths, err = m.ChangedPaths(ctxT(t), h(c2), h(c3), at("apps"))
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, paths)
	assert.Equal(t, int64(3), m.TreesRead()-before, "two roots and the new apps tree; the old one is kept")

	// The delivery's file system starts from the apps tree just decoded.
	before = m.TreesRead()
	fsys, err := m.FS(h(c3), at("apps"))
	require.NoError(t, err)
	defer fsys.(io.Closer).Close()
	assert.Equal(t, int64(1), m.TreesRead()-before, "the root, to find apps; apps itself is shared")
	b, err := fs.ReadFile(fsys, "b")
	require.NoError(t, err)
	assert.Equal(t, "3", string(b))
}

// The first fetch into an empty mirror, after a listing of a server that
// speaks version 2, is one request (a git clone makes three: the
// capabilities, the refs, the pack), its pack indexed by git index-pack;
// a server that speaks version 0 only gets the clone, as before.
func TestFirstFetchAfterAListingIsOneRequest(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err)
	for _, v0 := range []bool{false, true} {
		t.Run(fmt.Sprint("v0 only ", v0), func(t *testing.T) {
			srv := gittest.NewServer(t)
			srv.SetV0Only(v0)
			repo := srv.NewRepo(t, "g/r")
			c := repo.Commit(t, "one", gittest.File("a/b", "1"), gittest.File("c", "2"))
			repo.Tag(t, "v1", true)
			lister := gitutil.NewLister() // the watcher's, which its mirrors share
			refs, err := lister.ListRefs(ctxT(t), repo.URL(), nil, []string{"refs/heads/", "refs/tags/"})
			require.NoError(t, err)
			lists, fetches := repo.Counts().Lists.Load(), repo.Counts().Fetches.Load()
			m, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: gitBin, Lister: lister})
			require.NoError(t, err)
			res, err := m.FetchListed(ctxT(t), nil, map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"], "refs/tags/v1": refs.Refs["refs/tags/v1"]})
			require.NoError(t, err)
			assert.True(t, res.Fetched)
			assert.Equal(t, c, res.Refs["refs/heads/main"].String())
			assert.Equal(t, c, res.Refs["refs/tags/v1"].String(), "the tag, peeled")
			if !v0 {
				assert.Equal(t, lists, repo.Counts().Lists.Load(), "no listing")
				assert.Equal(t, fetches+1, repo.Counts().Fetches.Load(), "one request")
			}
			fsys, err := m.FS(mustHash(c), Selection{Path: "a"})
			require.NoError(t, err)
			data, err := fs.ReadFile(fsys, "b")
			require.NoError(t, err)
			assert.Equal(t, "1", string(data))
			assert.False(t, m.Partial())
		})
	}
}
