package watcher_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A failed poll's TargetFailed carries a *RetryError with when the next
// poll is: a poll that fails in its fetch too.
func TestAFailedFetchTellsWhenTheNextPollIs(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("f", "1"))
	p := newLimitProxy(t, srv.URL())
	p.mu.Lock()
	p.failFetches = http.StatusInternalServerError
	p.mu.Unlock()

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: p.via(repo.URL()), Revision: "main"}), sink))
	start(t, w)
	e := obs.WaitFor(t, "the target failing", watchertest.Is(watcher.EventTargetFailed, "t"))
	polled := obs.WaitFor(t, "the failed poll", func(e watcher.Event) bool { return e.Type == watcher.EventPolled && e.Err != nil })
	require.Error(t, polled.Err)
	var re *watcher.RetryError
	assert.True(t, errors.As(e.Err, &re), "TargetFailed of a failed poll: %v", e.Err)
	_ = time.Second
}
