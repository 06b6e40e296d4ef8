package watcher_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A host that answers a fetch (a full mirror's) with 429 Retry-After: 60
// is rate limited as when it answers a listing: no request to it until
// the end, the limit reported, the poll not the remote's failure.
func TestAFetchsRateLimitStopsItsHost(t *testing.T) {
	srv := gittest.NewServer(t)
	r1, r2 := srv.NewRepo(t, "g/one"), srv.NewRepo(t, "g/two")
	r1.Commit(t, "1", gittest.File("f", "1"))
	r2.Commit(t, "1", gittest.File("f", "1"))
	p := newLimitProxy(t, srv.URL())
	u1, u2 := p.via(r1.URL()), p.via(r2.URL())

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(
		watcher.Target{ID: "one", URL: u1, Revision: "main"},
		watcher.Target{ID: "two", URL: u2, Revision: "main"}), sink))
	start(t, w)
	sink.WaitDelivered(t, 2)

	r1.Commit(t, "2", gittest.File("f", "2"))
	p.arm()
	t0 := time.Now()
	require.True(t, w.Trigger(u1))
	obs.WaitFor(t, "the poll of one after the trigger", func(e watcher.Event) bool {
		return e.Type == watcher.EventPolled && e.Err != nil && !e.Time.Before(t0)
	})
	// Another remote of the host, hinted during the limit.
	require.True(t, w.Trigger(u2))
	time.Sleep(time.Second)

	refused := p.refusedRequests()
	require.NotEmpty(t, refused, "the fetch was refused")
	assert.Equal(t, 1, len(refused), "requests sent to the host after its 429 (the first is the refused fetch): %q", refused)
	assert.Equal(t, 1, obs.Count(watchertest.Is(watcher.EventRateLimited, "")), "the rate limit is reported once")
	for _, e := range obs.Events() {
		if e.Type == watcher.EventFetched && e.Err != nil {
			t.Logf("fetch error: %v", e.Err)
		}
		if e.Type == watcher.EventTargetFailed {
			var re *watcher.RetryError
			t.Logf("TargetFailed %s carries RetryError: %v (%v)", e.Target.ID, asRetry(e.Err, &re), e.Err)
		}
	}
}
