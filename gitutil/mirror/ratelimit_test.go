package mirror

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// A fetch a host refuses with a rate limit is one request, whichever way
// the mirror fetches (go-git's one request, the git CLI's first fetch or
// fetch): reported as the limit, never asked again another way.
func TestAFetchARateLimitRefusesIsOneRequest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		empty bool
	}{
		{"one request into a mirror", Options{}, false},
		{"the git CLI's first fetch", Options{GitCLI: "git"}, true},
		{"the git CLI's fetch", Options{GitCLI: "git", CLIFetches: true}, false},
		{"go-git's first fetch", Options{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := gittest.NewServer(t)
			repo := srv.NewRepo(t, "g/r")
			repo.Commit(t, "one", gittest.File("a", "1"))
			l := gitutil.NewLister()
			tc.opts.Lister = l
			m, err := Open(t.TempDir(), repo.URL(), tc.opts)
			require.NoError(t, err)
			if !tc.empty {
				_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
				require.NoError(t, err)
			}
			repo.Commit(t, "two", gittest.File("a", "2"))
			refs, err := l.ListRefs(ctxT(t), repo.URL(), nil, []string{"HEAD"})
			require.NoError(t, err)

			for _, kind := range []gittest.LimitKind{gittest.TooManyRequests, gittest.Unavailable} {
				srv.Limit(gittest.Limit{Kind: kind, Until: time.Now().Add(time.Minute)})
				before := len(srv.Requests())
				_, err = m.FetchListed(ctxT(t), nil, map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"]})
				require.ErrorIs(t, err, gitutil.ErrRateLimited, "%v", kind)
				assert.Len(t, srv.Requests(), before+1, "%v: one request", kind)
			}
			srv.Limit(gittest.Limit{})
			_, err = m.FetchListed(ctxT(t), nil, map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"]})
			require.NoError(t, err, "after the limit")
		})
	}
}
