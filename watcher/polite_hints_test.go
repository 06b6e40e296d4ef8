package watcher_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A stream of hints (push webhooks) for two remotes of a host does not
// keep a third remote of the host from being polled: hints go first, but
// not every time.
func TestAHintStormLeavesBackgroundPollsTheirTurns(t *testing.T) {
	srv := gittest.NewServer(t)
	a1, a2, b := srv.NewRepo(t, "g/a1"), srv.NewRepo(t, "g/a2"), srv.NewRepo(t, "g/b")
	for _, r := range []*gittest.Repo{a1, a2, b} {
		r.Commit(t, "1", gittest.File("f", "1"))
	}
	host := strings.TrimPrefix(srv.URL(), "http://")
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	ta := []watcher.Target{{ID: "a1", URL: a1.URL(), Revision: "main"}, {ID: "a2", URL: a2.URL(), Revision: "main"}}
	src := watchertest.NewSource(ta...)
	w := newWatcher(t, obs, watcher.WithHostBudget(host, watcher.HostBudget{InFlight: 1}))
	require.NoError(t, w.Route(src, sink))
	start(t, w)
	sink.WaitDelivered(t, 2)

	srv.Delay(50 * time.Millisecond)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the storm
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			w.Trigger(a1.URL())
			w.Trigger(a2.URL())
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(200 * time.Millisecond)
	src.Set(append(ta, watcher.Target{ID: "b", URL: b.URL(), Revision: "main"})...)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && b.Counts().Lists.Load() == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	starved := b.Counts().Lists.Load() == 0
	a1n, a2n := a1.Counts().Lists.Load(), a2.Counts().Lists.Load()
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	if starved {
		sink.WaitCommit(t, "b", hash(b.Commit(t, "noop", gittest.File("g", "1")))) // not a wedge: b goes once the storm ends
	}
	require.False(t, starved, "b listed within 5s during the storm (a1 listed %d times, a2 %d meanwhile)", a1n, a2n)
}
