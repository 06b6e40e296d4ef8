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
// fetch): reported as the limit, never asked again another way. While the
// limit holds, the mirror sends the host nothing; after it, it fetches.
// (The git CLI passes no header on: its 503 is an outage, its 429 a limit
// of the default wait.)
func TestAFetchARateLimitRefusesIsOneRequest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		empty bool
		kind  gittest.LimitKind
	}{
		{"one request into a mirror", Options{}, false, gittest.TooManyRequests},
		{"one request into a mirror, 503", Options{}, false, gittest.Unavailable},
		{"the git CLI's first fetch", Options{GitCLI: "git"}, true, gittest.TooManyRequests},
		{"the git CLI's fetch", Options{GitCLI: "git", CLIFetches: true}, false, gittest.TooManyRequests},
		{"go-git's first fetch", Options{}, true, gittest.TooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
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
			listed := map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"]}

			end := time.Now().Add(2 * time.Second)
			srv.Limit(gittest.Limit{Kind: tc.kind, Until: end})
			before := len(srv.Requests())
			_, err = m.FetchListed(ctxT(t), nil, listed)
			require.ErrorIs(t, err, gitutil.ErrRateLimited)
			assert.Len(t, srv.Requests(), before+1, "one request")
			_, err = m.FetchListed(ctxT(t), nil, listed)
			require.ErrorIs(t, err, gitutil.ErrRateLimited)
			assert.Len(t, srv.Requests(), before+1, "none while the limit holds")

			var rl *gitutil.RateLimitError
			require.ErrorAs(t, err, &rl)
			if tc.opts.CLIFetches {
				// git does not pass the answer's headers on: the default.
				assert.WithinDuration(t, time.Now().Add(gitutil.DefaultRateLimitWait), rl.Until, 5*time.Second)
				return
			}
			time.Sleep(time.Until(rl.Until) + 100*time.Millisecond)
			_, err = m.FetchListed(ctxT(t), nil, listed)
			require.NoError(t, err, "after the limit")
		})
	}
}
