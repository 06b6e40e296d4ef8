package watcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A suspended target is polled but nothing is handed to its sinks, and a
// delivery it was retrying stops; resumed, it gets the latest commit at
// once.
func TestSuspendedTargetIsNotDelivered(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	target := watcher.Target{ID: "t", URL: repo.URL()}
	src := watchertest.NewSource(target)
	require.NoError(t, w.Route(src, sink))
	start(t, w)
	sink.WaitCommit(t, "t", c1)

	// Failing, and retried: then suspended, the retries stop.
	sink.SetHook(func(context.Context, watcher.Change) error { return errors.New("refused") })
	c2 := repo.Commit(t, "2", gittest.File("f", "2"))
	pollNow(t, w, obs, repo.URL())
	obs.WaitCount(t, "retries", 2, watchertest.Is(watcher.EventDeliveryFailed, "t"))
	suspended := target
	suspended.Suspend = true
	src.Set(suspended)
	obs.WaitFor(t, "suspended at c2", func(e watcher.Event) bool {
		return e.Type == watcher.EventSuspended && e.Commit == c2
	})
	require.Eventually(t, func() bool { return w.Stats().Retrying == 0 }, 10*time.Second, time.Millisecond,
		"no retry pending for a suspended target")
	sink.SetHook(nil)

	c3 := repo.Commit(t, "3", gittest.File("f", "3"))
	pollNow(t, w, obs, repo.URL())
	obs.WaitFor(t, "suspended at c3", func(e watcher.Event) bool {
		return e.Type == watcher.EventSuspended && e.Commit == c3
	})
	for _, c := range sink.Delivered() {
		assert.Equal(t, c1, c.To, "only what was delivered before")
	}

	src.Set(target)
	got := sink.WaitCommit(t, "t", c3)
	assert.Equal(t, c1, got.From, "the latest commit, once resumed")
}
