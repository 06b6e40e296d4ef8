package watcher_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// handShard owns the remotes whose key holds one of its words; a test moves
// the words, as a Lease shard does when replicas come and go.
type handShard struct {
	mu      sync.Mutex
	words   []string
	changed chan struct{}
}

func newHandShard(words ...string) *handShard {
	return &handShard{words: words, changed: make(chan struct{})}
}

func (s *handShard) Owns(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.words {
		if strings.Contains(key, w) {
			return true
		}
	}
	return false
}

func (s *handShard) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *handShard) set(words ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.words = words
	close(s.changed)
	s.changed = make(chan struct{})
}

// Two replicas with the same targets: each polls and delivers only the
// remotes its shard owns, and takes over the other's when told.
func TestShardSplitsRemotesBetweenReplicas(t *testing.T) {
	srv := gittest.NewServer(t)
	red, blue := srv.NewRepo(t, "g/red"), srv.NewRepo(t, "g/blue")
	r1 := red.Commit(t, "red", gittest.File("a", "1"))
	b1 := blue.Commit(t, "blue", gittest.File("a", "1"))
	targets := []watcher.Target{{ID: "red", URL: red.URL()}, {ID: "blue", URL: blue.URL()}}

	shardA, shardB := newHandShard("red"), newHandShard("blue")
	obsA, obsB := watchertest.NewObserver(), watchertest.NewObserver()
	sinkA, sinkB := watchertest.NewSink("a"), watchertest.NewSink("b")
	a := newWatcher(t, obsA, watcher.WithShard(shardA))
	b := newWatcher(t, obsB, watcher.WithShard(shardB))
	require.NoError(t, a.Route(watchertest.NewSource(targets...), sinkA))
	require.NoError(t, b.Route(watchertest.NewSource(targets...), sinkB))
	start(t, a)
	start(t, b)
	sinkA.WaitCommit(t, "red", r1)
	sinkB.WaitCommit(t, "blue", b1)
	polledOf := func(repo *gittest.Repo) func(watcher.Event) bool {
		return func(e watcher.Event) bool { return e.Type == watcher.EventPolled && e.Remote == repo.URL() }
	}
	polled := func(o *watchertest.Observer, repo *gittest.Repo) int { return o.Count(polledOf(repo)) }
	// A poll's event is emitted when the poll ends, which may be after its
	// delivery: wait for it rather than read it at once.
	obsA.WaitCount(t, "a's poll of red", 1, polledOf(red))
	obsB.WaitCount(t, "b's poll of blue", 1, polledOf(blue))
	assert.Equal(t, 1, polled(obsA, red))
	assert.Zero(t, polled(obsA, blue), "blue is b's")
	assert.Equal(t, 1, polled(obsB, blue))
	assert.Zero(t, polled(obsB, red), "red is a's")
	assert.False(t, a.Trigger(blue.URL()), "blue is not a's to poll")
	st := a.Stats()
	assert.Equal(t, 2, st.Targets)
	assert.Equal(t, 1, st.Unowned)
	assert.Equal(t, 1, st.Remotes)

	// b goes: a takes blue over, and polls it at once.
	shardB.set()
	shardA.set("red", "blue")
	sinkA.WaitCommit(t, "blue", b1)
	b2 := blue.Commit(t, "blue 2", gittest.File("a", "2"))
	pollNow(t, a, obsA, blue.URL())
	sinkA.WaitCommit(t, "blue", b2)
	for _, c := range sinkB.Delivered() {
		assert.NotEqual(t, b2, c.To, "b no longer delivers blue")
	}
	assert.Equal(t, 0, b.Stats().Remotes)
}

// A replica that loses a remote cancels the delivery it was making and
// drops what it had been offered: the new owner delivers, the old one does
// not deliver again (not on retry, not on resync).
func TestHandOffCancelsDeliveriesInFlight(t *testing.T) {
	srv := gittest.NewServer(t)
	red := srv.NewRepo(t, "g/red")
	r1 := red.Commit(t, "red", gittest.File("a", "1"))
	target := watcher.Target{ID: "red", URL: red.URL()}

	started, cancelled := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	slow := watcher.Named("slow", watcher.SinkFunc(func(ctx context.Context, c watcher.Change) error {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-ctx.Done()
		if calls.Load() == 1 {
			close(cancelled)
		}
		return ctx.Err()
	}))
	shardA, shardB := newHandShard("red"), newHandShard()
	obsA, obsB := watchertest.NewObserver(), watchertest.NewObserver()
	a := newWatcher(t, obsA, watcher.WithShard(shardA), watcher.WithResync(200*time.Millisecond))
	b := newWatcher(t, obsB, watcher.WithShard(shardB))
	sinkB := watchertest.NewSink("slow")
	require.NoError(t, a.Route(watchertest.NewSource(target), slow))
	require.NoError(t, b.Route(watchertest.NewSource(target), sinkB))
	start(t, a)
	start(t, b)
	<-started

	shardA.set()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery in flight was not cancelled")
	}
	shardB.set("red")
	sinkB.WaitCommit(t, "red", r1)
	time.Sleep(time.Second) // retries and resyncs would come in this time
	assert.EqualValues(t, 1, calls.Load(), "the old owner does not deliver again")
	assert.Zero(t, obsA.Count(func(e watcher.Event) bool { return e.Type == watcher.EventDeliveryFailed }),
		"a hand-off is not a failure")
}

// A remote another replica takes over is not a target that left: the
// replica that lost it keeps no deliverer for its targets and never calls
// the sink's Remove; when the remote comes back, what was delivered stays
// delivered (the checkpoint) and the next commit is delivered once.
func TestLosingARemoteNeverRemovesItsTargets(t *testing.T) {
	srv := gittest.NewServer(t)
	red := srv.NewRepo(t, "g/red")
	r1 := red.Commit(t, "red", gittest.File("a", "1"))
	targets := []watcher.Target{{ID: "red-1", URL: red.URL()}, {ID: "red-2", URL: red.URL(), Path: "."}}
	shard := newHandShard("red")
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("s")
	w := newWatcher(t, obs, watcher.WithShard(shard))
	require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
	start(t, w)
	sink.WaitCommit(t, "red-1", r1)
	sink.WaitCommit(t, "red-2", r1)

	shard.set()
	require.Eventually(t, func() bool { return w.Stats().Remotes == 0 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 2, w.Stats().Unowned)
	r2 := red.Commit(t, "red 2", gittest.File("a", "2"))
	shard.set("red")
	sink.WaitCommit(t, "red-1", r2)
	sink.WaitCommit(t, "red-2", r2)
	assert.Empty(t, sink.Removed(), "a remote handed over is not a target gone")
	assert.Len(t, sink.Delivered(), 4, "r1 once each, r2 once each: nothing delivered again")
}
