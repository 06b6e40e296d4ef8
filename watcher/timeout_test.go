package watcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A target's Timeout bounds the requests of its remote's polls (Flux's
// spec.timeout): a host slower than it fails the poll for a deadline,
// where the watcher's own timeouts wait; a remote takes the longest
// Timeout of its targets, one without counting as the watcher's. A
// negative one is invalid.
func TestATargetsTimeoutBoundsItsRemotesRequests(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "app")
	first := repo.Commit(t, "one", gittest.File("a.yaml", "v: 1\n"))
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	quick := watcher.Target{ID: "quick", URL: repo.URL(), Revision: "main", Timeout: 100 * time.Millisecond}
	src := watchertest.NewSource(quick)
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(src, sink))
	srv.Delay(time.Second)
	start(t, w)
	e := obs.WaitFor(t, "the poll fails for its deadline", watchertest.Is(watcher.EventTargetFailed, "quick"))
	assert.True(t, errors.Is(e.Err, context.DeadlineExceeded), "%v", e.Err)
	assert.Empty(t, sink.Delivered())

	// With a target of the watcher's timeouts beside it, the remote waits.
	src.Set(quick, watcher.Target{ID: "patient", URL: repo.URL(), Revision: "main"})
	sink.WaitCommit(t, "quick", hash(first))
	sink.WaitCommit(t, "patient", hash(first))

	bad := watcher.Target{ID: "x", URL: repo.URL(), Timeout: -time.Second}
	assert.ErrorIs(t, bad.Validate(), watcher.ErrInvalidTarget)
}
