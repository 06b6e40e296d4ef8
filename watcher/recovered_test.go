package watcher_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A target that comes back at the commit its sink has is reported
// (EventTargetRecovered, with the commit), and its sink says it has that
// commit (EventUpToDate), though nothing is delivered: after a failing
// remote, and after it was not watched. A new program on the same
// checkpoints reports each target it finds its sink has (EventUpToDate),
// where nothing else would be said of it.
func TestATargetBackAtItsCommitIsReported(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "app")
	c1 := hash(repo.Commit(t, "one", gittest.File("a.yaml", "v: 1\n")))
	store, err := watcher.NewFileStore(t.TempDir())
	require.NoError(t, err)
	cache := t.TempDir()
	target := watcher.Target{ID: "app", URL: repo.URL(), Revision: "main"}
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	src := watchertest.NewSource(target)
	w := newWatcherIn(t, obs, cache, watcher.WithStore(store))
	require.NoError(t, w.Route(src, sink))
	stop := watchertest.Run(t, w.Run)
	sink.WaitCommit(t, "app", c1)

	srv.Deny("app.git", 503)
	w.Trigger(repo.URL())
	obs.WaitFor(t, "failing", watchertest.Is(watcher.EventTargetFailed, "app"))
	srv.Deny("app.git", 0)
	w.Trigger(repo.URL())
	e := obs.WaitFor(t, "recovered", watchertest.Is(watcher.EventTargetRecovered, "app"))
	assert.Equal(t, c1, e.Commit)
	assert.Equal(t, "refs/heads/main", e.Ref)
	e = obs.WaitFor(t, "its sink has its commit", watchertest.Is(watcher.EventUpToDate, "app"))
	assert.Equal(t, c1, e.Commit)
	assert.Equal(t, "rec", e.Sink)

	src.Set(watcher.NotWatched("app", errors.New("its Secret is gone")))
	obs.WaitFor(t, "not watched", watchertest.Is(watcher.EventInvalidTarget, "app"))
	src.Set(target)
	require.Eventually(t, func() bool {
		var recovered []watcher.Event
		for _, e := range obs.Events() {
			if watchertest.Is(watcher.EventTargetRecovered, "app")(e) {
				recovered = append(recovered, e)
			}
		}
		return len(recovered) == 2 && recovered[1].Commit == c1
	}, watchertest.DefaultTimeout, 10*time.Millisecond, "watched again: recovered a second time, at its commit")
	assert.Len(t, sink.Delivered(), 1, "nothing delivered again")

	stop()
	obs2 := watchertest.NewObserver()
	w2 := newWatcherIn(t, obs2, cache, watcher.WithStore(store))
	require.NoError(t, w2.Route(watchertest.NewSource(target), sink))
	start(t, w2)
	e = obs2.WaitFor(t, "up to date after a start", watchertest.Is(watcher.EventUpToDate, "app"))
	assert.Equal(t, c1, e.Commit)
	assert.Len(t, sink.Delivered(), 1, "nothing delivered again")
}
