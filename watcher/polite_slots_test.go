package watcher_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A host holds half the listing slots at most: with Concurrency{Lists:
// 4} (below twice the default InFlight of 8), a slow host holds two, and
// another host's remote is listed while it is slow.
func TestASlowHostHoldsHalfTheListingSlots(t *testing.T) {
	slow, fast := gittest.NewServer(t), gittest.NewServer(t)
	var targets []watcher.Target
	for i := range 6 {
		r := slow.NewRepo(t, fmt.Sprintf("g/slow%d", i))
		r.Commit(t, "1", gittest.File("f", "1"))
		targets = append(targets, watcher.Target{ID: fmt.Sprintf("slow%d", i), URL: r.URL(), Revision: "main"})
	}
	fr := fast.NewRepo(t, "g/fast")
	fr.Commit(t, "1", gittest.File("f", "1"))
	release := slow.HoldAll()
	t.Cleanup(release)

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	src := watchertest.NewSource(targets...)
	w := newWatcher(t, obs, watcher.WithConcurrency(watcher.Concurrency{Lists: 4}), watcher.WithTimeouts(watcher.Timeouts{List: 2 * time.Minute}))
	require.NoError(t, w.Route(src, sink))
	start(t, w)
	require.Eventually(t, func() bool { return slow.Held() == 2 }, 10*time.Second, 10*time.Millisecond, "the slow host's listings hold")

	src.Set(append(targets, watcher.Target{ID: "fast", URL: fr.URL(), Revision: "main"})...)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && len(sink.Delivered()) == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	require.Len(t, sink.Delivered(), 1, "the fast host's target delivered within 10s while the slow host holds %d listings", slow.Held())
}
