package gitutil

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// manyRefs gives the repository n refs/pull/N/head refs, as a GitHub
// repository has one per pull request.
func manyRefs(t *testing.T, repo *gittest.Repo, n int, commit string) {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "create refs/pull/%d/head %s\n", i, commit)
	}
	repo.Git(t, "push", "-q", "origin", "HEAD:refs/heads/side")
	cmd := exec.Command("git", "update-ref", "--stdin")
	cmd.Env = append(os.Environ(), "GIT_DIR="+repo.BareDir())
	cmd.Stdin = strings.NewReader(b.String())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// With prefixes, a version 2 server lists only the refs asked for: HEAD
// (and the branch it names), a branch, the tags of a semver range. The
// listing of 5,000 pull-request refs is not sent.
func TestListRefsWithPrefixesSpeaksV2(t *testing.T) {
	l := NewLister()
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	repo.Tag(t, "v1.2.0", true)
	manyRefs(t, repo, 5000, c1)

	before := repo.Counts().ListBytes.Load()
	all, err := l.ListRefs(ctxT(t), repo.URL(), nil, nil)
	require.NoError(t, err)
	v0Bytes := repo.Counts().ListBytes.Load() - before
	assert.Greater(t, len(all.Refs), 5000)

	for _, tc := range []struct {
		revision string
		want     []string
	}{
		{"", []string{"refs/heads/main"}},
		{"side", []string{"refs/heads/side"}},
		{"refs/heads/main", []string{"refs/heads/main"}},
		{">=1.0.0", []string{"refs/tags/v1.2.0"}},
	} {
		rev, err := ParseRevision(tc.revision)
		require.NoError(t, err)
		before := repo.Counts().ListBytes.Load()
		got, err := l.ListRefs(ctxT(t), repo.URL(), nil, rev.RefPrefixes())
		require.NoError(t, err)
		v2Bytes := repo.Counts().ListBytes.Load() - before
		for _, name := range tc.want {
			assert.Contains(t, got.Refs, name, "%q", tc.revision)
		}
		assert.Less(t, len(got.Refs), 5, "%q: only what was asked for", tc.revision)
		assert.Less(t, v2Bytes, int64(1024), "%q: bytes on the wire", tc.revision)
		res, err := Resolve(rev, got)
		require.NoError(t, err, "%q", tc.revision)
		assert.Equal(t, c1, res.Commit.String(), "%q", tc.revision)
		t.Logf("%q: %d bytes (all refs: %d)", tc.revision, v2Bytes, v0Bytes)
	}
	caps := repo.Counts().Capabilities.Load()
	head, err := l.ListRefs(ctxT(t), repo.URL(), nil, []string{"HEAD"})
	require.NoError(t, err)
	assert.Equal(t, "refs/heads/main", head.Head)
	assert.Equal(t, caps, repo.Counts().Capabilities.Load(), "the capabilities are asked for once: a listing is one request")
	tags, err := l.ListRefs(ctxT(t), repo.URL(), nil, []string{"refs/tags/"})
	require.NoError(t, err)
	assert.Equal(t, c1, tags.Peeled["refs/tags/v1.2.0"].String(), "annotated tags are peeled")
}

// A server that answers in version 0 gets the whole listing, and is asked
// in version 0 from then on: the first call's probe costs one more
// advertisement, later calls one each.
func TestListRefsFallsBackToV0(t *testing.T) {
	l := NewLister()
	srv := gittest.NewServer(t)
	srv.SetV0Only(true)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	for i, want := range []int64{2, 1, 1} {
		lists := repo.Counts().Lists.Load()
		got, err := l.ListRefs(ctxT(t), repo.URL(), nil, []string{"HEAD"})
		require.NoError(t, err)
		assert.Equal(t, c1, got.Refs["refs/heads/main"].String())
		assert.Equal(t, "refs/heads/main", got.Head)
		assert.Equal(t, lists+want, repo.Counts().Lists.Load(), "call %d", i+1)
	}
	_, remembered := l.noV2.Get("http://" + strings.TrimPrefix(srv.URL(), "http://"))
	assert.True(t, remembered)
}

// A server that spoke version 2 for one repository is asked another's
// refs at once: the first listing of each of a thousand remotes on one
// forge is one request, not two. A repository it does not have is still
// a clear error.
func TestListRefsAsksAServersCapabilitiesOnce(t *testing.T) {
	l := NewLister()
	srv := gittest.NewServer(t)
	one, two := srv.NewRepo(t, "g/one"), srv.NewRepo(t, "g/two")
	one.Commit(t, "one", gittest.File("a", "1"))
	c := two.Commit(t, "two", gittest.File("a", "2"))
	_, err := l.ListRefs(ctxT(t), one.URL(), nil, []string{"HEAD"})
	require.NoError(t, err)
	require.Positive(t, one.Counts().Capabilities.Load())
	refs, err := l.ListRefs(ctxT(t), two.URL(), nil, []string{"HEAD"})
	require.NoError(t, err)
	assert.Equal(t, c, refs.Refs["refs/heads/main"].String())
	assert.Zero(t, two.Counts().Capabilities.Load(), "the server's capabilities were known")
	assert.EqualValues(t, 1, two.Counts().Lists.Load(), "one request")
	_, err = l.ListRefs(ctxT(t), srv.URL()+"/g/none.git", nil, []string{"HEAD"})
	require.ErrorIs(t, err, transport.ErrRepositoryNotFound)
}

// Listings running side by side, as a watcher's 16 do, reuse their
// connections from one cycle to the next: a cycle of many remotes on one
// forge opens none (with net/http's 2 idle connections per host, most
// listings of every cycle opened one and left it in TIME_WAIT).
func TestListingsReuseTheirConnections(t *testing.T) {
	l := NewLister()
	srv := gittest.NewServer(t)
	const side = 16
	var urls []string
	for i := range side {
		repo := srv.NewRepo(t, fmt.Sprintf("g/r%d", i))
		repo.Commit(t, "1", gittest.File("f", "1"))
		urls = append(urls, repo.URL())
	}
	cycle := func() {
		var g errgroup.Group
		for _, u := range urls {
			g.Go(func() error {
				_, err := l.ListRefs(ctxT(t), u, nil, []string{"HEAD"})
				return err
			})
		}
		require.NoError(t, g.Wait())
	}
	cycle()
	first := srv.Connections()
	for range 3 {
		cycle()
	}
	t.Logf("connections: %d in the first cycle, %d in the next three", first, srv.Connections()-first)
	assert.LessOrEqual(t, srv.Connections()-first, int64(side/4), "later cycles reuse the first's connections")
}

// A listing's HTTP client is shared by the listings of the same TLS and
// proxy settings only: one made for a CA bundle, skipped verification or
// a proxy (and its credentials) never serves a listing without them.
func TestListingClientsAreSharedBySettingsOnly(t *testing.T) {
	l := NewLister()
	proxy := transport.ProxyOptions{URL: "http://proxy.example:3128"}
	settings := []Transport{
		{},
		{CABundle: gittest.NewTLSServer(t).CACert()},
		{InsecureSkipTLS: true},
		{Proxy: proxy},
		{Proxy: transport.ProxyOptions{URL: proxy.URL, Username: "u", Password: "p"}},
	}
	seen := map[*http.Client]int{}
	for i, s := range settings {
		c, err := l.client(s)
		require.NoError(t, err)
		again, err := l.client(s)
		require.NoError(t, err)
		assert.Same(t, c, again, "settings %d: one client", i)
		if j, ok := seen[c]; ok {
			t.Errorf("settings %d get the client of settings %d", i, j)
		}
		seen[c] = i
	}
}

// Listings share their request's headers without credentials, and each
// repository's parsed request: a listing with credentials never lends
// them to a later one without, of another repository or the same.
func TestAListingsCredentialsAreNotLentToTheNext(t *testing.T) {
	l := NewLister()
	srv := gittest.NewServer(t)
	one, two := srv.NewRepo(t, "g/one"), srv.NewRepo(t, "g/two")
	one.Commit(t, "one", gittest.File("a", "1"))
	two.Commit(t, "two", gittest.File("a", "2"))
	srv.SetBasicAuth("u", "p")
	auth := &Auth{Username: "u", Password: "p", AllowInsecureHTTP: true}
	for _, bearer := range []bool{false, true} {
		if bearer {
			auth = &Auth{BearerToken: "p", AllowInsecureHTTP: true} // refused by this server
		}
		_, err := l.ListRefs(ctxT(t), one.URL(), auth, []string{"HEAD"})
		if bearer {
			require.Error(t, err)
		} else {
			require.NoError(t, err)
		}
		for _, u := range []string{two.URL(), one.URL()} {
			_, err = l.ListRefs(ctxT(t), u, nil, []string{"HEAD"})
			require.ErrorIs(t, err, transport.ErrAuthenticationRequired, "%s without credentials", u)
		}
	}
	assert.Equal(t, []string{"application/x-git-upload-pack-request"}, l.header["Content-Type"])
	assert.Len(t, l.header, 5, "the shared headers are never written")
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
