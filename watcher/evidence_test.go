package watcher_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// deliverBoth runs a watcher of a and b into sink until both are at c, and
// stops it: what the sink holds is what a previous run left.
func deliverBoth(t *testing.T, sink *inventorySink, c string, a, b watcher.Target) {
	t.Helper()
	w := newWatcher(t, watchertest.NewObserver())
	require.NoError(t, w.Route(watchertest.NewSource(a, b), sink))
	stop := watchertest.Run(t, w.Run)
	sink.WaitCommit(t, a.ID, c)
	sink.WaitCommit(t, b.ID, c)
	stop()
}

// A source that cannot read its set at start (a configuration file
// missing while a volume is remounted) gives none: nothing is removed,
// the reason is reported, and when the set comes back the targets are
// delivered and the start-up sweep finds nothing to remove.
func TestASourceWithoutItsSetAtStartRemovesNothing(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("a/f", "1"), gittest.File("b/f", "1"))
	sink := &inventorySink{Sink: watchertest.NewSink("inv"), held: map[string]bool{}}
	a, b := watcher.Target{ID: "a", URL: repo.URL(), Path: "a"}, watcher.Target{ID: "b", URL: repo.URL(), Path: "b"}
	deliverBoth(t, sink, c1, a, b)

	obs := watchertest.NewObserver()
	w := newWatcher(t, obs)
	src := watchertest.NewSource()
	missing := errors.New("config.yaml: no such file or directory")
	src.NoSet(missing)
	require.NoError(t, w.Route(src, sink))
	watchertest.Run(t, w.Run)
	e := obs.WaitFor(t, "the source's reason", func(e watcher.Event) bool { return e.Type == watcher.EventNoSet })
	require.ErrorIs(t, e.Err, missing)
	st := w.Stats()
	assert.Equal(t, 1, st.NoSet)
	assert.False(t, st.Synced)
	assert.Empty(t, sink.Removed(), "no set is not an empty set")

	c2 := repo.Commit(t, "2", gittest.File("a/f", "2"), gittest.File("b/f", "2"))
	src.Set(a, b)
	sink.WaitCommit(t, "a", c2)
	sink.WaitCommit(t, "b", c2)
	pollNow(t, w, obs, repo.URL())
	assert.Empty(t, sink.Removed())
	assert.Equal(t, 0, w.Stats().NoSet)
}

// A source that loses its set after giving one keeps the last: its
// targets are neither removed nor forgotten, and still delivered.
func TestASourceThatLosesItsSetKeepsTheLast(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("a/f", "1"))
	sink := watchertest.NewSink("s")
	a := watcher.Target{ID: "a", URL: repo.URL(), Path: "a"}
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs)
	src := watchertest.NewSource(a)
	require.NoError(t, w.Route(src, sink))
	watchertest.Run(t, w.Run)
	sink.WaitCommit(t, "a", c1)

	src.NoSet(errors.New("informer: forbidden"))
	obs.WaitFor(t, "no set", func(e watcher.Event) bool { return e.Type == watcher.EventNoSet })
	c2 := repo.Commit(t, "2", gittest.File("a/f", "2"))
	pollNow(t, w, obs, repo.URL())
	sink.WaitCommit(t, "a", c2)
	assert.Empty(t, sink.Removed())
	st := w.Stats()
	assert.Equal(t, 1, st.Targets)
	assert.Equal(t, 1, st.NoSet)
}

// A target its source still names is wanted, even when it is invalid now
// (a stricter validation after an upgrade, a hostile edit): it is no
// longer watched, and reported, but never removed, neither while running
// nor by the sweep at the next start.
func TestATargetStillNamedButInvalidIsKept(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("a/f", "1"), gittest.File("b/f", "1"))
	sink := &inventorySink{Sink: watchertest.NewSink("inv"), held: map[string]bool{}}
	a, b := watcher.Target{ID: "a", URL: repo.URL(), Path: "a"}, watcher.Target{ID: "b", URL: repo.URL(), Path: "b"}
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs)
	src := watchertest.NewSource(a, b)
	require.NoError(t, w.Route(src, sink))
	stop := watchertest.Run(t, w.Run)
	sink.WaitCommit(t, "b", c1)

	bad := b
	bad.Path = "../b"
	src.Set(a, bad)
	obs.WaitFor(t, "b invalid", watchertest.Is(watcher.EventInvalidTarget, "b"))
	pollNow(t, w, obs, repo.URL())
	stop()
	assert.Empty(t, sink.Removed(), "named, though invalid: wanted")

	obs = watchertest.NewObserver()
	w = newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(a, bad), sink))
	watchertest.Run(t, w.Run)
	obs.WaitFor(t, "b invalid", watchertest.Is(watcher.EventInvalidTarget, "b"))
	obs.WaitFor(t, "a delivered", watchertest.Is(watcher.EventDelivered, "a"))
	pollNow(t, w, obs, repo.URL())
	assert.Empty(t, sink.Removed(), "the start-up sweep keeps what is named")
	held, err := sink.Targets(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, held)
}

// NoSet outside a source's Run, or without a reason, does nothing.
func TestNoSetOutsideASourceDoesNothing(t *testing.T) {
	watcher.NoSet(context.Background(), errors.New("x"))
	watcher.NoSet(context.Background(), nil)
}

// A target its source names but cannot watch (NotWatched: a refused or
// invalid spec, a Secret that cannot be read) is wanted: reported as
// invalid, never removed, and watched again when the source gives it whole.
func TestATargetNamedButNotWatchedIsKept(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("a/f", "1"), gittest.File("b/f", "1"))
	sink := &inventorySink{Sink: watchertest.NewSink("inv"), held: map[string]bool{}}
	a, b := watcher.Target{ID: "a", URL: repo.URL(), Path: "a"}, watcher.Target{ID: "b", URL: repo.URL(), Path: "b"}
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs)
	src := watchertest.NewSource(a, b)
	require.NoError(t, w.Route(src, sink))
	watchertest.Run(t, w.Run)
	sink.WaitCommit(t, "b", c1)

	refused := errors.New("secret team/creds: forbidden")
	src.Set(a, watcher.NotWatched("b", refused))
	e := obs.WaitFor(t, "b not watched", watchertest.Is(watcher.EventInvalidTarget, "b"))
	require.ErrorIs(t, e.Err, refused)
	c2 := repo.Commit(t, "2", gittest.File("a/f", "2"), gittest.File("b/f", "2"))
	pollNow(t, w, obs, repo.URL())
	sink.WaitCommit(t, "a", c2)
	assert.Empty(t, sink.Removed())
	assert.Equal(t, 1, w.Stats().Invalid)

	src.Set(a, b)
	sink.WaitCommit(t, "b", c2)
	assert.Empty(t, sink.Removed())
}
