package watcher_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
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
	sink.WaitCommit(t, a.ID, hash(c))
	sink.WaitCommit(t, b.ID, hash(c))
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
	sink.WaitCommit(t, "a", hash(c2))
	sink.WaitCommit(t, "b", hash(c2))
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
	sink.WaitCommit(t, "a", hash(c1))

	src.NoSet(errors.New("informer: forbidden"))
	obs.WaitFor(t, "no set", func(e watcher.Event) bool { return e.Type == watcher.EventNoSet })
	c2 := repo.Commit(t, "2", gittest.File("a/f", "2"))
	pollNow(t, w, obs, repo.URL())
	sink.WaitCommit(t, "a", hash(c2))
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
	sink.WaitCommit(t, "b", hash(c1))

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
	sink.WaitCommit(t, "b", hash(c1))

	refused := errors.New("secret team/creds: forbidden")
	src.Set(a, watcher.NotWatched("b", refused))
	e := obs.WaitFor(t, "b not watched", watchertest.Is(watcher.EventInvalidTarget, "b"))
	require.ErrorIs(t, e.Err, refused)
	c2 := repo.Commit(t, "2", gittest.File("a/f", "2"), gittest.File("b/f", "2"))
	pollNow(t, w, obs, repo.URL())
	sink.WaitCommit(t, "a", hash(c2))
	assert.Empty(t, sink.Removed())
	assert.Equal(t, 1, w.Stats().Invalid)

	src.Set(a, b)
	sink.WaitCommit(t, "b", hash(c2))
	assert.Empty(t, sink.Removed())
}

// A target named but not watched, then gone from its set (a GitRepository
// whose spec was refused, then deleted), is removed from the Inventory
// sinks that hold it: it has no deliverer to be told, and the sinks are
// swept again for it, as at start; the targets still named are kept.
func TestATargetNotWatchedThenGoneIsRemoved(t *testing.T) {
	_, c1, ts := fourTargets(t)
	sink := &inventorySink{Sink: watchertest.NewSink("inv"), held: map[string]bool{}}
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs)
	src := watchertest.NewSource(ts...)
	require.NoError(t, w.Route(src, sink))
	watchertest.Run(t, w.Run)
	for _, tg := range ts {
		sink.WaitCommit(t, tg.ID, hash(c1))
	}
	src.Set(ts[0], watcher.NotWatched("b", errors.New("spec.include is not served")), ts[2], ts[3])
	obs.WaitFor(t, "b not watched", watchertest.Is(watcher.EventInvalidTarget, "b"))
	assert.Empty(t, sink.Removed(), "named: kept")

	src.Set(ts[0], ts[2], ts[3])
	sink.WaitRemoved(t, "b")
	ids, err := sink.Targets(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "c", "d"}, ids)
	for _, r := range sink.Removed() {
		assert.Equal(t, "b", r.ID, "only b removed")
	}
}

// fourTargets commits a repository of four paths and returns a target of
// each.
func fourTargets(t *testing.T) (repo *gittest.Repo, commit string, ts []watcher.Target) {
	srv := gittest.NewServer(t)
	repo = srv.NewRepo(t, "g/r")
	commit = repo.Commit(t, "1", gittest.File("a/f", "1"), gittest.File("b/f", "1"), gittest.File("c/f", "1"), gittest.File("d/f", "1"))
	for _, id := range []string{"a", "b", "c", "d"} {
		ts = append(ts, watcher.Target{ID: id, URL: repo.URL(), Path: id})
	}
	return repo, commit, ts
}

// A source's set that drops more than the budget's share of its targets
// at once is held: nothing removed, reported, counted; the same set still
// given after the confirmation delay, the removals are carried out. Within
// the budget, a removal is at once.
func TestASetOverTheDeletionBudgetIsHeldThenCarriedOut(t *testing.T) {
	w, obs, src, sink, ts, repo := budgetWatcher(t, 2*time.Second)

	src.Set(ts[0], ts[1], ts[2]) // one of four: within the budget
	sink.WaitRemoved(t, "d")

	held := time.Now()
	src.Set(ts[0]) // two of three: over it
	e := obs.WaitFor(t, "held", func(e watcher.Event) bool { return e.Type == watcher.EventRemovalsHeld })
	assert.ErrorContains(t, e.Err, "remove 2 of 3 targets (b, c; 1 more removed")
	assert.Equal(t, 2, w.Stats().RemovalsHeld)
	pollNow(t, w, obs, repo.URL())
	assert.Len(t, sink.Removed(), 1, "only d, so far")

	sink.WaitRemoved(t, "b")
	sink.WaitRemoved(t, "c")
	assert.GreaterOrEqual(t, time.Since(held), 2*time.Second, "not before the same decision was made again after the delay")
	assert.Equal(t, 0, w.Stats().RemovalsHeld)
}

// A held decision that is not made again (the targets come back) is
// forgotten; ConfirmRemovals carries out what is held at once.
func TestAHeldRemovalIsForgottenOrConfirmed(t *testing.T) {
	w, obs, src, sink, ts, repo := budgetWatcher(t, time.Hour)

	src.Set() // a blink: every target gone, then back
	obs.WaitFor(t, "held", func(e watcher.Event) bool { return e.Type == watcher.EventRemovalsHeld })
	src.Set(ts...)
	c2 := repo.Commit(t, "2", gittest.File("a/f", "2"), gittest.File("b/f", "2"), gittest.File("c/f", "2"), gittest.File("d/f", "2"))
	pollNow(t, w, obs, repo.URL())
	for _, tg := range ts {
		sink.WaitCommit(t, tg.ID, hash(c2))
	}
	assert.Empty(t, sink.Removed())
	assert.Equal(t, 0, w.Stats().RemovalsHeld, "forgotten")

	src.Set(ts[0])
	obs.WaitFor(t, "held again", func(e watcher.Event) bool {
		return e.Type == watcher.EventRemovalsHeld && strings.Contains(e.Err.Error(), "3 of 4")
	})
	w.ConfirmRemovals()
	for _, id := range []string{"b", "c", "d"} {
		sink.WaitRemoved(t, id)
	}
	assert.Len(t, sink.Removed(), 3)
}

// The sweep at start holds too: an inventory whose targets no source
// names, all of them, is not emptied until the same sweep is made again
// after the delay.
func TestASweepOverTheDeletionBudgetIsHeld(t *testing.T) {
	_, c1, ts := fourTargets(t)
	sink := &inventorySink{Sink: watchertest.NewSink("inv"), held: map[string]bool{}}
	deliverBoth(t, sink, c1, ts[0], ts[1])
	deliverBoth(t, sink, c1, ts[2], ts[3])

	obs := watchertest.NewObserver()
	w := newWatcher(t, obs, watcher.WithRemovalBudget(0.5, 2*time.Second))
	require.NoError(t, w.Route(watchertest.NewSource(), sink))
	start := time.Now()
	watchertest.Run(t, w.Run)
	e := obs.WaitFor(t, "the sweep held", func(e watcher.Event) bool { return e.Type == watcher.EventRemovalsHeld })
	assert.ErrorContains(t, e.Err, "sweep at start")
	assert.ErrorContains(t, e.Err, "4 of 4")
	assert.Empty(t, sink.Removed())
	for _, tg := range ts {
		sink.WaitRemoved(t, tg.ID)
	}
	assert.GreaterOrEqual(t, time.Since(start), 2*time.Second)
}

// forgettingSink is an inventorySink that is a watcher.Forgetter.
type forgettingSink struct {
	*inventorySink
	forgot []string
}

func (s *forgettingSink) Forget(_ context.Context, t watcher.Target) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, t.ID)
	s.forgot = append(s.forgot, t.ID)
	return nil
}

// A target that leaves its set while suspended is not removed: its sink
// forgets it (what it applied stays, as Flux leaves a suspended object's
// resources), and no later sweep removes it either. Not suspended, a
// target that leaves is removed.
func TestASuspendedTargetLeavingItsSetIsForgottenNotRemoved(t *testing.T) {
	_, c1, ts := fourTargets(t)
	sink := &forgettingSink{inventorySink: &inventorySink{Sink: watchertest.NewSink("inv"), held: map[string]bool{}}}
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs)
	src := watchertest.NewSource(ts...)
	require.NoError(t, w.Route(src, sink))
	watchertest.Run(t, w.Run)
	for _, tg := range ts {
		sink.WaitCommit(t, tg.ID, hash(c1))
	}
	paused := ts[0]
	paused.Suspend = true
	src.Set(paused, ts[1], ts[2], ts[3])
	obs.WaitFor(t, "a suspended", watchertest.Is(watcher.EventSuspended, "a"))

	src.Set(ts[1], ts[2], ts[3])
	e := obs.WaitFor(t, "a forgotten", watchertest.Is(watcher.EventForgotten, "a"))
	require.NoError(t, e.Err)
	src.Set(ts[2], ts[3])
	sink.WaitRemoved(t, "b")
	assert.Equal(t, []string{"b"}, ids(sink.Removed()), "a was never removed")
	sink.mu.Lock()
	assert.Equal(t, []string{"a"}, sink.forgot)
	sink.mu.Unlock()
	held, err := sink.Targets(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"c", "d"}, held, "no record of a left for a sweep to remove")
}

func ids(ts []watcher.Target) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

// budgetWatcher runs a watcher of the four targets into a recording sink,
// with a budget of half confirmed after confirm, until all are delivered.
func budgetWatcher(t *testing.T, confirm time.Duration) (*watcher.Watcher, *watchertest.Observer, *watchertest.Source, *watchertest.Sink, []watcher.Target, *gittest.Repo) {
	repo, c1, ts := fourTargets(t)
	sink := watchertest.NewSink("s")
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs, watcher.WithRemovalBudget(0.5, confirm))
	src := watchertest.NewSource(ts...)
	require.NoError(t, w.Route(src, sink))
	watchertest.Run(t, w.Run)
	for _, tg := range ts {
		sink.WaitCommit(t, tg.ID, hash(c1))
	}
	return w, obs, src, sink, ts, repo
}

// heldWith waits for a held decision whose message contains what.
func heldWith(t *testing.T, obs *watchertest.Observer, what string) {
	t.Helper()
	obs.WaitFor(t, what, func(e watcher.Event) bool {
		return e.Type == watcher.EventRemovalsHeld && strings.Contains(e.Err.Error(), what)
	})
}

// What the budget counts cannot be got around: renaming every target (the
// new ones are not the base of the share), removing one at a time (the
// removals of the last delay count), giving part of a held decision back
// (the rest stays held).
func TestTheDeletionBudgetCannotBeGotAround(t *testing.T) {
	t.Run("rename", func(t *testing.T) {
		w, obs, src, sink, ts, repo := budgetWatcher(t, time.Hour)
		renamed := slices.Clone(ts)
		for i := range renamed {
			renamed[i].ID = "new-" + renamed[i].ID
		}
		src.Set(renamed...)
		heldWith(t, obs, "remove 4 of 4 targets")
		pollNow(t, w, obs, repo.URL())
		assert.Empty(t, sink.Removed(), "a rename of every target is held")
	})
	t.Run("one at a time", func(t *testing.T) {
		w, obs, src, sink, ts, repo := budgetWatcher(t, time.Hour)
		src.Set(ts[0], ts[1], ts[2]) // one of four: within the budget
		sink.WaitRemoved(t, "d")
		src.Set(ts[0], ts[1]) // one more: two of four within the delay, not more than half
		sink.WaitRemoved(t, "c")
		src.Set(ts[0]) // and one more: three of four within the delay
		heldWith(t, obs, "remove 1 of 2 targets (b; 2 more removed")
		pollNow(t, w, obs, repo.URL())
		assert.Len(t, sink.Removed(), 2, "one at a time counts")
	})
	t.Run("part given back", func(t *testing.T) {
		w, obs, src, sink, ts, repo := budgetWatcher(t, time.Hour)
		src.Set(ts[0])
		heldWith(t, obs, "remove 3 of 4 targets (b, c, d")
		src.Set(ts[0], ts[1]) // b back: c and d stay held
		pollNow(t, w, obs, repo.URL())
		assert.Empty(t, sink.Removed())
		assert.Equal(t, 2, w.Stats().RemovalsHeld)
	})
}

// A held decision is not carried out while its source cannot give its
// set: the delay alone is no evidence.
func TestAHeldRemovalWaitsForTheSourcesSet(t *testing.T) {
	w, obs, src, sink, ts, repo := budgetWatcher(t, time.Second)
	src.Set(ts[0])
	obs.WaitFor(t, "held", func(e watcher.Event) bool { return e.Type == watcher.EventRemovalsHeld })
	src.NoSet(errors.New("config.yaml is missing"))
	obs.WaitFor(t, "no set", func(e watcher.Event) bool { return e.Type == watcher.EventNoSet })
	time.Sleep(2 * time.Second)
	pollNow(t, w, obs, repo.URL())
	assert.Empty(t, sink.Removed(), "held while the source has no set")
	src.Set(ts[0])
	for _, id := range []string{"b", "c", "d"} {
		sink.WaitRemoved(t, id)
	}
}

// A target named again while its removal is failing keeps what it has:
// the removal is dropped, not carried out behind it. In a bubble, so that
// the watcher takes the set that names it again before any retry of the
// removal is due, and so that the retries that would follow (every 10ms
// to 100ms) all come within the second waited after.
func TestATargetNamedAgainStopsItsRemoval(t *testing.T) {
	git, repo := memoryRemote()
	c1 := repo.Commit(t, map[string]string{"a/f": "1", "b/f": "1", "c/f": "1", "d/f": "1"})
	var ts []watcher.Target
	for _, id := range []string{"a", "b", "c", "d"} {
		ts = append(ts, watcher.Target{ID: id, URL: repo.URL(), Path: id})
	}
	cacheDir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		failing := &failingRemover{Sink: watchertest.NewSink("s")}
		obs := watchertest.NewObserver()
		w := newWatcherIn(t, obs, cacheDir, watcher.WithGit(git))
		src := watchertest.NewSource(ts...)
		require.NoError(t, w.Route(src, failing))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		for _, tg := range ts {
			failing.WaitCommit(t, tg.ID, c1)
		}
		failing.fail.Store(true)
		src.Set(ts[0], ts[1], ts[2])
		obs.WaitFor(t, "d's removal failed", func(e watcher.Event) bool {
			return e.Type == watcher.EventRemoved && e.Target.ID == "d" && e.Err != nil
		})
		src.Set(ts...)
		synctest.Wait() // the set taken, no time passed: no retry came meanwhile
		failing.fail.Store(false)
		time.Sleep(time.Second) // the bubble's clock: a retry would have come, and succeeded
		synctest.Wait()
		assert.Empty(t, failing.Removed(), "the removal was dropped")
		c2 := repo.Commit(t, map[string]string{"d/f": "2"})
		w.Trigger(repo.URL())
		failing.WaitCommit(t, "d", c2)
		assert.Empty(t, failing.Removed())
		cancel()
		require.NoError(t, <-done)
	})
}

// failingRemover fails Remove while fail is set.
type failingRemover struct {
	*watchertest.Sink
	fail atomic.Bool
}

func (s *failingRemover) Remove(ctx context.Context, t watcher.Target) error {
	if s.fail.Load() {
		return errors.New("apiserver unavailable")
	}
	return s.Sink.Remove(ctx, t)
}

// A target suspended when the program stopped, and gone from its set when
// it starts again, is forgotten by the sweep, not removed: its checkpoint
// says it was suspended. Resumed before, it is removed as any other.
func TestATargetSuspendedWhileDownIsForgottenAtStart(t *testing.T) {
	_, c1, ts := fourTargets(t)
	store := watcher.NewMemoryStore()
	sink := &forgettingSink{inventorySink: &inventorySink{Sink: watchertest.NewSink("inv"), held: map[string]bool{}}}
	run := func(set ...watcher.Target) (*watchertest.Observer, func()) {
		obs := watchertest.NewObserver()
		w := newWatcher(t, obs, watcher.WithStore(store))
		require.NoError(t, w.Route(watchertest.NewSource(set...), sink))
		return obs, watchertest.Run(t, w.Run)
	}
	_, stop := run(ts...)
	for _, tg := range ts {
		sink.WaitCommit(t, tg.ID, hash(c1))
	}
	stop()
	pausedA, pausedB := ts[0], ts[1]
	pausedA.Suspend, pausedB.Suspend = true, true
	mark := func(key string, want bool) {
		t.Helper()
		require.Eventually(t, func() bool {
			cp, ok, err := store.Get(context.Background(), key)
			return err == nil && ok && cp.Suspended == want
		}, 10*time.Second, 20*time.Millisecond, "%s suspended=%v recorded", key, want)
	}
	obs, stop := run(pausedA, pausedB, ts[2], ts[3])
	obs.WaitFor(t, "a suspended", watchertest.Is(watcher.EventSuspended, "a"))
	mark("a/inv", true)
	mark("b/inv", true)
	stop()
	_, stop = run(pausedA, ts[1], ts[2], ts[3]) // b resumed
	mark("b/inv", false)
	stop()

	obs, _ = run(ts[2], ts[3]) // a and b deleted while down
	obs.WaitFor(t, "a forgotten at start", watchertest.Is(watcher.EventForgotten, "a"))
	sink.WaitRemoved(t, "b")
	assert.Equal(t, []string{"b"}, ids(sink.Removed()), "a was never removed")
}

// stepSource hands each set sent on its channel, in order, each as soon as
// it comes.
type stepSource chan []watcher.Target

func (s stepSource) Run(ctx context.Context, update func([]watcher.Target)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ts := <-s:
			update(ts)
		}
	}
}

// A suspended target that is resumed and then leaves its set, in two sets
// handed faster than the watcher binds them, left its set resumed: it is
// removed, not forgotten. One suspended and then gone as fast is
// forgotten, never removed.
func TestATargetResumedThenGoneIsRemoved(t *testing.T) {
	_, c1, ts := fourTargets(t)
	sink := &forgettingSink{inventorySink: &inventorySink{Sink: watchertest.NewSink("inv"), held: map[string]bool{}}}
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs)
	src := make(stepSource, 2)
	src <- ts
	require.NoError(t, w.Route(src, sink))
	watchertest.Run(t, w.Run)
	for _, tg := range ts {
		sink.WaitCommit(t, tg.ID, hash(c1))
	}
	paused := ts[0]
	paused.Suspend = true
	src <- []watcher.Target{paused, ts[1], ts[2], ts[3]}
	obs.WaitFor(t, "a suspended", watchertest.Is(watcher.EventSuspended, "a"))

	// Resumed, then gone: one after the other, at once.
	src <- ts
	src <- ts[1:]
	sink.WaitRemoved(t, "a")
	sink.mu.Lock()
	assert.Empty(t, sink.forgot, "a was resumed when it left")
	sink.mu.Unlock()

	// Suspended, then gone, as fast: b left its set suspended, and what it
	// applied stays.
	pausedB := ts[1]
	pausedB.Suspend = true
	src <- []watcher.Target{pausedB, ts[2], ts[3]}
	src <- ts[2:]
	e := obs.WaitFor(t, "b forgotten", watchertest.Is(watcher.EventForgotten, "b"))
	require.NoError(t, e.Err)
	assert.Equal(t, []string{"a"}, ids(sink.Removed()), "b was never removed")
}
