package mirror

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// Every way to reach a remote goes through the proxy an Auth names: both
// listings (protocol v2 with prefixes, go-git's v0 without), the direct
// fetch of listed refs, go-git's fetch and the git CLI's first clone, over
// http (forwarded) and https (tunnelled).
func TestProxy(t *testing.T) {
	for _, tls := range []bool{false, true} {
		name := "http"
		if tls {
			name = "https"
		}
		t.Run(name, func(t *testing.T) {
			srv := gittest.NewServer(t)
			if tls {
				srv = gittest.NewTLSServer(t)
			}
			repo := srv.NewRepo(t, "g/r")
			c1 := repo.Commit(t, "one", gittest.File("a", "1"))
			proxy := gittest.NewProxy(t, "squid", "pr0xy-s3cret")
			auth := &gitutil.Auth{Proxy: &gitutil.Proxy{URL: proxy.URL(), Username: "squid", Password: "pr0xy-s3cret"}}
			if tls {
				auth.CABundle = srv.CACert()
			}
			through := func(what string, f func()) {
				t.Helper()
				before := proxy.Passed.Load()
				f()
				assert.Greater(t, proxy.Passed.Load(), before, "%s went through the proxy", what)
			}
			through("a v2 listing", func() {
				refs, err := gitutil.ListRefs(ctxT(t), repo.URL(), auth, []string{"refs/heads/"})
				require.NoError(t, err)
				assert.Equal(t, c1, refs.Refs["refs/heads/main"].String())
			})
			through("a v0 listing", func() {
				_, err := gitutil.ListRefs(ctxT(t), repo.URL(), auth, nil)
				require.NoError(t, err)
			})
			m, err := Open(t.TempDir(), repo.URL(), Options{})
			require.NoError(t, err)
			through("go-git's fetch", func() {
				_, err := m.Fetch(ctxT(t), auth, []string{"refs/heads/main"})
				require.NoError(t, err)
			})
			c2 := repo.Commit(t, "two", gittest.File("a", "2"))
			through("the direct fetch", func() {
				res, err := m.FetchListed(ctxT(t), auth, map[string]gitutil.Hash{"refs/heads/main": mustHash(c2)})
				require.NoError(t, err)
				assert.Equal(t, c2, res.Refs["refs/heads/main"].String())
			})
			if !tls {
				gitBin, statuses := recordingGit(t)
				through("the git CLI's clone", func() {
					cli, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: gitBin})
					require.NoError(t, err)
					_, err = cli.Fetch(ctxT(t), auth, []string{"refs/heads/main"})
					require.NoError(t, err)
				})
				assert.Equal(t, "0\n", statuses(), "the CLI itself succeeded, through the proxy")
			}
			assert.Zero(t, proxy.Refused.Load(), "the credentials are sent at once")

			// The wrong proxy password fails, and says nothing of it.
			wrong := *auth
			wrong.Proxy = &gitutil.Proxy{URL: proxy.URL(), Username: "squid", Password: "wr0ng-s3cret"}
			refused := proxy.Refused.Load()
			_, err = gitutil.ListRefs(ctxT(t), repo.URL(), &wrong, []string{"refs/heads/"})
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "wr0ng-s3cret")
			m2, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: "git"})
			require.NoError(t, err)
			_, err = m2.Fetch(ctxT(t), &wrong, []string{"refs/heads/main"})
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "wr0ng-s3cret")
			assert.Greater(t, proxy.Refused.Load(), refused)
		})
	}
}
