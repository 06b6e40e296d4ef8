package watcher_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// fleetOn makes n repositories on srv, of a commit each (forks of one:
// no git runs for each), and a target each.
func fleetOn(t *testing.T, srv *gittest.Server, prefix string, n int) ([]*gittest.Repo, []watcher.Target) {
	base := srv.NewRepo(t, prefix+"/base")
	base.Commit(t, "1", gittest.File("f", "1"))
	var repos []*gittest.Repo
	var targets []watcher.Target
	for i := range n {
		r := base.Fork(t, fmt.Sprintf("%s/r%d", prefix, i))
		repos = append(repos, r)
		targets = append(targets, watcher.Target{ID: fmt.Sprintf("%s-%d", prefix, i), URL: r.URL()})
	}
	return repos, targets
}

// A host's rate limit, in each form the forges answer it, stops every
// request to that host, hints included, until the end it gave; the first
// answer is reported once, as a rate limit with its end, to the log, the
// observers and the targets; another host's targets are delivered
// meanwhile; after the end, the limited host's are.
func TestARateLimitStopsEveryRequestToItsHostUntilItsEnd(t *testing.T) {
	t.Parallel()
	for name, kind := range map[string]gittest.LimitKind{
		"429 Retry-After": gittest.TooManyRequests, "503 Retry-After": gittest.Unavailable,
		"GitHub": gittest.GitHubRateLimit, "GitLab": gittest.GitLabRateLimit,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			limited, calm := gittest.NewServer(t), gittest.NewServer(t)
			repos, targets := fleetOn(t, limited, "lim", 4)
			other, more := fleetOn(t, calm, "calm", 1)
			obs := watchertest.NewObserver()
			sink := watchertest.NewSink("rec")
			// One request at a time to the limited host: a request sent
			// before the first refusal's answer came back cannot be
			// recalled, and one at a time there is none.
			w := newWatcher(t, obs, watcher.WithMinInterval(200*time.Millisecond), watcher.WithInterval(200*time.Millisecond),
				watcher.WithHostBudget(strings.TrimPrefix(limited.URL(), "http://"), watcher.HostBudget{InFlight: 1}))
			require.NoError(t, w.Route(watchertest.NewSource(append(targets, more...)...), sink))
			start(t, w)
			sink.WaitDelivered(t, 5)

			// The limit's end is far enough for a loaded machine to do
			// what follows within it; the test waits for it once.
			end := time.Now().Add(6 * time.Second)
			limited.Limit(gittest.Limit{Kind: kind, Until: end})
			next := hash(other[0].Commit(t, "2", gittest.File("f", "2")))
			obs.WaitFor(t, "the rate limit", func(e watcher.Event) bool { return e.Type == watcher.EventRateLimited })
			sent := len(limited.Requests())
			for range 5 { // hints knock, and are held to the limit
				for _, r := range repos {
					w.Trigger(r.URL())
				}
				w.Trigger(other[0].URL())
				time.Sleep(50 * time.Millisecond)
			}
			sink.WaitCommit(t, "calm-0", next)
			// Served while the limited host was held: it had been sent
			// nothing since its refusal.
			require.Equal(t, sent, len(limited.Requests()), "the other host was served during the limit")
			var commits []gitutil.Hash
			for _, r := range repos {
				commits = append(commits, hash(r.Commit(t, "2", gittest.File("f", "2"))))
			}
			for i, c := range commits {
				sink.WaitCommit(t, fmt.Sprintf("lim-%d", i), c)
			}

			reqs := limited.Requests()
			first := slices.IndexFunc(reqs, func(r gittest.Request) bool { return r.Status >= 400 })
			require.GreaterOrEqual(t, first, 0)
			answered := reqs[first].Done
			for _, r := range reqs[first+1:] {
				if r.Time.After(answered) && r.Time.Before(end) {
					t.Errorf("a request at %s, before the limit's end at %s (%s %s)", r.Time.Format(time.StampMilli), end.Format(time.StampMilli), r.Kind, r.Repo)
				}
			}
			assert.Equal(t, 1, obs.Count(func(e watcher.Event) bool { return e.Type == watcher.EventRateLimited }), "once an episode")
			failed := obs.Events()
			i := slices.IndexFunc(failed, func(e watcher.Event) bool {
				return e.Type == watcher.EventTargetFailed && errors.Is(e.Err, gitutil.ErrRateLimited)
			})
			require.GreaterOrEqual(t, i, 0, "a target was told")
			var rl *gitutil.RateLimitError
			require.ErrorAs(t, failed[i].Err, &rl)
			assert.False(t, rl.Until.Before(end.Truncate(time.Second)), "its end: %s", rl.Until)
			var retry *watcher.RetryError
			require.ErrorAs(t, failed[i].Err, &retry)
			assert.False(t, retry.At.Before(rl.Until), "polled next after the end")
		})
	}
}

// A host that holds every answer does not hold the other hosts back: it
// is sent at most its budget's requests at once, and a hint for a remote
// of another host is served while all of them hang.
func TestAHintIsNotHeldBehindASlowHost(t *testing.T) {
	slow, calm := gittest.NewServer(t), gittest.NewServer(t)
	repos, targets := fleetOn(t, slow, "slow", 12)
	other, more := fleetOn(t, calm, "calm", 1)
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(append(targets, more...)...), sink))
	start(t, w)
	sink.WaitDelivered(t, 13)

	release := slow.HoldAll()
	defer release()
	for _, r := range repos {
		r.Commit(t, "2", gittest.File("f", "2"))
		w.Trigger(r.URL())
	}
	require.Eventually(t, func() bool { return slow.Held() == watcher.DefaultHostInFlight }, 10*time.Second, 10*time.Millisecond)
	next := hash(other[0].Commit(t, "2", gittest.File("f", "2")))
	require.True(t, w.Trigger(other[0].URL()))
	sink.WaitCommit(t, "calm-0", next)
	assert.Equal(t, watcher.DefaultHostInFlight, slow.Held(), "the slow host was sent its budget, no more, and answered none")
	release()
	for i, r := range repos {
		sink.WaitCommit(t, fmt.Sprintf("slow-%d", i), hash(r.Git(t, "rev-parse", "HEAD")))
	}
}

// A push hint for a remote of a host busy with a start-up goes ahead of
// the host's background polls: once it is in line, the next turn at the
// host that is not a turn in progress or a fetch is its listing. The
// host is held still (its answers held at the server) while the hint
// gets in line, so that no machine's speed decides the order; and it has
// one request in flight, so that the order of turns is the order the
// server sees (two turns in flight race each other to it: the one
// granted second may arrive first).
func TestAHintGoesBeforeItsHostsBackgroundPolls(t *testing.T) {
	t.Parallel()
	srv := gittest.NewServer(t)
	const n, rate, inFlight = 24, 20, 1
	_, targets := fleetOn(t, srv, "many", n)
	host := strings.TrimPrefix(srv.URL(), "http://")
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithHostBudget("", watcher.HostBudget{PerSecond: rate, Burst: 1, InFlight: inFlight}))
	require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
	start(t, w)
	obs.WaitFor(t, "the start-up under way", func(e watcher.Event) bool { return e.Type == watcher.EventListed })

	release := srv.HoldAll()
	defer release()
	require.Eventually(t, func() bool { return srv.Held() == inFlight }, time.Minute, 10*time.Millisecond, "the host's turns in progress held")
	before := srv.Requests()
	seen := map[string]bool{}
	for _, r := range before {
		seen[r.Repo] = true
	}
	// The hinted remote: one the start-up has not reached.
	hinted := -1
	for i := n - 1; i >= 0 && hinted < 0; i-- {
		if !seen[fmt.Sprintf("many/r%d.git", i)] {
			hinted = i
		}
	}
	require.GreaterOrEqual(t, hinted, 0, "a remote the start-up has not reached")
	require.True(t, w.Trigger(targets[hinted].URL))
	require.Eventually(t, func() bool { h, _ := w.HostLine(host); return h == 1 }, time.Minute, 10*time.Millisecond, "the hint in its host's line")
	_, background := w.HostLine(host)
	require.Positive(t, background, "background polls wait behind the hint")
	release()
	sink.WaitDelivered(t, n)

	reqs := srv.Requests()[len(before):]
	mine := slices.IndexFunc(reqs, func(r gittest.Request) bool { return r.Repo == fmt.Sprintf("many/r%d.git", hinted) })
	require.GreaterOrEqual(t, mine, 0, "the hinted remote was listed after the hint")
	// Ahead of it: the turns in progress (their next requests) and their
	// fetches, which go first; never a background poll of a remote the
	// start-up had not reached.
	for _, r := range reqs[:mine] {
		assert.True(t, seen[r.Repo], "a background poll of %s (%s) went before the hint", r.Repo, r.Kind)
	}
	// The rate, its burst (a first listing's two requests) and the slack
	// of turns under way at a second's start.
	assert.LessOrEqual(t, gittest.MaxPerSecond(srv.Requests(), time.Second), rate+2+slack, "the host's rate")
}

// Remotes a host answers 404 or 401 for cost one request a poll, and
// back off to the ceiling, while a healthy remote of the same host is
// polled at its interval.
func TestBrokenRemotesStayCheap(t *testing.T) {
	srv := gittest.NewServer(t)
	const broken = 50
	repos, targets := fleetOn(t, srv, "broken", broken)
	healthy, more := fleetOn(t, srv, "ok", 1)
	for i, r := range repos {
		code := 404
		if i%2 == 1 {
			code = 401
		}
		srv.Deny(r.Name(), code)
	}
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	ceiling := 200 * time.Millisecond
	w := newWatcher(t, obs, watcher.WithMinInterval(100*time.Millisecond), watcher.WithInterval(100*time.Millisecond),
		watcher.WithRetryBackoff(watcher.Backoff{Min: 25 * time.Millisecond, Max: ceiling}))
	require.NoError(t, w.Route(watchertest.NewSource(append(targets, more...)...), sink))
	start(t, w)
	sink.WaitDelivered(t, 1)
	// Until every broken remote has failed six times: its backoff is at
	// the ceiling (25 ms doubled to 200 ms by the fourth).
	pollsOf := func() map[string]int {
		n := map[string]int{}
		for _, e := range obs.Events() {
			if e.Type == watcher.EventPolled {
				n[e.Remote]++
			}
		}
		return n
	}
	require.Eventually(t, func() bool {
		n := pollsOf()
		for _, tg := range targets {
			if n[tg.URL] < 6 {
				return false
			}
		}
		return true
	}, time.Minute, 100*time.Millisecond)
	polled := pollsOf()
	polls := func(url string) int { return polled[url] }

	for i, r := range repos {
		n := len(srv.RequestsOf(r.Name()))
		p := polls(targets[i].URL)
		assert.LessOrEqual(t, n, p+1, "%s: requests %d for %d polls (one more: the server's capabilities, once)", r.Name(), n, p)
	}
	for i, want := range []error{transport.ErrRepositoryNotFound, transport.ErrAuthenticationRequired} {
		var last watcher.Event
		for _, e := range obs.Events() {
			if e.Type == watcher.EventTargetFailed && e.Target.ID == targets[i].ID {
				last = e
			}
		}
		require.ErrorIs(t, last.Err, want)
		var next *watcher.RetryError
		require.ErrorAs(t, last.Err, &next)
		assert.GreaterOrEqual(t, next.At.Sub(last.Time), ceiling/2-20*time.Millisecond, "the backoff at its ceiling, told the target")
	}
	// From then on the healthy remote keeps being polled, and never fails:
	// the broken ones' backoff is theirs alone. (How often it is polled
	// against them depends on the machine: when its host's turns are
	// saturated, every remote of the host gets its turn in line.)
	require.Eventually(t, func() bool {
		n := pollsOf()
		for _, tg := range targets {
			if n[tg.URL] < polled[tg.URL]+4 {
				return false
			}
		}
		return true
	}, time.Minute, 100*time.Millisecond)
	url := healthy[0].URL()
	assert.GreaterOrEqual(t, pollsOf()[url]-polled[url], 2, "the healthy remote kept being polled")
	assert.Zero(t, obs.Count(func(e watcher.Event) bool {
		return e.Type == watcher.EventTargetFailed && e.Target.ID == more[0].ID
	}), "the healthy remote never failed")
}
