package watcher_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A chain runs its steps in order with one checkpoint; a failed step is
// retried without running the steps before it again, and a new commit
// starts from the first step. Removal goes through the steps, last first.
func TestChainRetriesFromTheFailedStep(t *testing.T) {
	git, repo := memoryRemote()
	c1 := repo.Commit(t, map[string]string{"f": "1"})

	first, second := watchertest.NewSink("first"), watchertest.NewSink("second")
	var order []string
	var failOnce atomic.Bool
	failOnce.Store(true)
	first.SetHook(func(context.Context, watcher.Change) error { order = append(order, "first"); return nil })
	second.SetHook(func(ctx context.Context, c watcher.Change) error {
		order = append(order, "second")
		if failOnce.Swap(false) {
			return errors.New("not yet")
		}
		return nil
	})
	src := watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL()})
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs, watcher.WithGit(git))
	require.NoError(t, w.Route(src, watcher.Chain("publish", first, second)))
	start(t, w)

	second.WaitCommit(t, "t", c1)
	assert.Equal(t, []string{"first", "second", "second"}, order, "the retry started at the failed step")
	e := obs.WaitFor(t, "the chain's delivery", watchertest.Is(watcher.EventDelivered, "t"))
	assert.Equal(t, "publish", e.Sink, "one checkpoint, the chain's")
	failed := obs.WaitFor(t, "the failure", watchertest.Is(watcher.EventDeliveryFailed, "t"))
	assert.ErrorContains(t, failed.Err, "publish: step 2 (second): not yet")

	c2 := repo.Commit(t, map[string]string{"f": "2"})
	pollNow(t, w, obs, repo.URL())
	second.WaitCommit(t, "t", c2)
	assert.Equal(t, []string{"first", "second", "second", "first", "second"}, order)

	src.Set()
	obs.WaitFor(t, "the removal", watchertest.Is(watcher.EventRemoved, "t"))
	require.Len(t, second.Removed(), 1)
	require.Len(t, first.Removed(), 1)
	assert.Equal(t, "t", first.Removed()[0].ID)
}
