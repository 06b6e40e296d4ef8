package watcher_test

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A suspended target is polled but nothing is handed to its sinks, and a
// delivery it was retrying stops; resumed, it gets the latest commit at
// once. An attempt already under way when the target is suspended may
// still call the sink, once; the sink refuses c2 throughout, so that
// attempt cannot deliver it whenever it runs.
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
	sink.WaitCommit(t, "t", hash(c1))

	// Failing, and retried: then suspended, the retries stop.
	c2 := repo.Commit(t, "2", gittest.File("f", "2"))
	sink.SetHook(func(_ context.Context, c watcher.Change) error {
		if c.To == hash(c2) {
			return errors.New("refused")
		}
		return nil
	})
	pollNow(t, w, obs, repo.URL())
	obs.WaitCount(t, "retries", 2, watchertest.Is(watcher.EventDeliveryFailed, "t"))
	suspended := target
	suspended.Suspend = true
	src.Set(suspended)
	obs.WaitFor(t, "suspended at c2", func(e watcher.Event) bool {
		return e.Type == watcher.EventSuspended && e.Commit == hash(c2)
	})
	triedC2 := attemptsAt(sink, c2)
	require.Eventually(t, func() bool { return w.Stats().Retrying == 0 }, 10*time.Second, time.Millisecond,
		"no retry pending for a suspended target")

	c3 := repo.Commit(t, "3", gittest.File("f", "3"))
	pollNow(t, w, obs, repo.URL())
	obs.WaitFor(t, "suspended at c3", func(e watcher.Event) bool {
		return e.Type == watcher.EventSuspended && e.Commit == hash(c3)
	})
	assert.Zero(t, attemptsAt(sink, c3), "c3 is not handed to the sink while suspended")
	for _, c := range sink.Delivered() {
		assert.Equal(t, hash(c1), c.To, "only what was delivered before")
	}

	src.Set(target)
	got := sink.WaitCommit(t, "t", hash(c3))
	assert.Equal(t, hash(c1), got.From, "the latest commit, once resumed")
	assert.LessOrEqual(t, attemptsAt(sink, c2), triedC2+1, "at most the attempt under way at the suspension")
}

// attemptsAt counts the calls of s with commit.
func attemptsAt(s *watchertest.Sink, commit string) int {
	n := 0
	for _, c := range s.Attempts() {
		if c.To == hash(commit) {
			n++
		}
	}
	return n
}

// inventorySink holds something for each target it was given, across
// "restarts" (it outlives the watcher), as the apply sink's inventories do.
type inventorySink struct {
	*watchertest.Sink
	mu   sync.Mutex
	held map[string]bool
}

func (s *inventorySink) Deliver(ctx context.Context, c watcher.Change) error {
	s.mu.Lock()
	s.held[c.Target.ID] = true
	s.mu.Unlock()
	return s.Sink.Deliver(ctx, c)
}

func (s *inventorySink) Remove(ctx context.Context, t watcher.Target) error {
	s.mu.Lock()
	delete(s.held, t.ID)
	s.mu.Unlock()
	return s.Sink.Remove(ctx, t)
}

func (s *inventorySink) Targets(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.held)), nil
}

// A target deleted while the program was not running is removed at the
// next start, once every source has given its set: what the sink holds is
// compared with what is wanted, level-based.
func TestTargetDeletedWhileDownIsRemovedAtStart(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("a/f", "1"), gittest.File("b/f", "1"))
	sink := &inventorySink{Sink: watchertest.NewSink("inv"), held: map[string]bool{}}
	a, b := watcher.Target{ID: "a", URL: repo.URL(), Path: "a"}, watcher.Target{ID: "b", URL: repo.URL(), Path: "b"}

	obs := watchertest.NewObserver()
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(a, b), sink))
	stop := watchertest.Run(t, w.Run)
	sink.WaitCommit(t, "a", hash(c1))
	sink.WaitCommit(t, "b", hash(c1))
	stop()

	// b is gone from the source while nothing runs; a second source's set
	// comes later, and nothing is removed before it did.
	obs = watchertest.NewObserver()
	w = newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(a), sink))
	require.NoError(t, w.Route(watcher.SourceFunc(func(ctx context.Context, update func([]watcher.Target)) error {
		<-ctx.Done()
		return nil
	}), watchertest.NewSink("other")))
	stop = watchertest.Run(t, w.Run)
	obs.WaitFor(t, "a delivered again", watchertest.Is(watcher.EventDelivered, "a"))
	pollNow(t, w, obs, repo.URL())
	stop()
	assert.Empty(t, sink.Removed(), "a source has not given its set yet: nothing is known to be gone")

	obs = watchertest.NewObserver()
	w = newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(a), sink))
	watchertest.Run(t, w.Run)
	sink.WaitRemoved(t, "b")
	obs.WaitFor(t, "b removed", watchertest.Is(watcher.EventRemoved, "b"))
	held, _ := sink.Targets(context.Background())
	assert.Equal(t, []string{"a"}, held)
}

// readsReport is a report that says the delivery read base too.
type readsReport []string

func (r readsReport) Reads() []string { return r }

// readingSink reads ../../base through Change.Root, as a kustomize
// overlay does, and says so.
type readingSink struct{ *watchertest.Sink }

func (s readingSink) DeliverReport(ctx context.Context, c watcher.Change) (any, error) {
	if _, err := fs.ReadFile(c.Root, "base/cm.yaml"); err != nil {
		return nil, err
	}
	return readsReport{"base", "overlays/prod/x", "../escape"}, s.Deliver(ctx, c)
}

// A delivery that read outside the target's path (and said so) is made
// again when a commit changes what it read, not only the path; a commit
// that changes neither is not delivered.
func TestWhatADeliveryReadOutsideItsPathIsWatched(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("base/cm.yaml", "1"), gittest.File("overlays/prod/k.yaml", "1"), gittest.File("docs/x", "1"))
	obs := watchertest.NewObserver()
	sink := readingSink{watchertest.NewSink("reads")}
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "prod", URL: repo.URL(), Path: "overlays/prod"}), sink))
	start(t, w)
	sink.WaitCommit(t, "prod", hash(c1))

	c2 := repo.Commit(t, "base only", gittest.File("base/cm.yaml", "2"))
	pollNow(t, w, obs, repo.URL())
	got := sink.WaitCommit(t, "prod", hash(c2))
	assert.Equal(t, watcher.ReasonNewCommit, got.Reason, "the base it read changed")

	c3 := repo.Commit(t, "neither", gittest.File("docs/x", "2"))
	pollNow(t, w, obs, repo.URL())
	obs.WaitFor(t, "c3 up to date", func(e watcher.Event) bool { return e.Type == watcher.EventUpToDate && e.Commit == hash(c3) })
	assert.Len(t, sink.Delivered(), 2, "a commit touching neither is not delivered")
}
