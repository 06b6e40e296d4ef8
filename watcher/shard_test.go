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

	"github.com/modwatch/modwatch/internal/dev/gittest"
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
	sinkA.WaitCommit(t, "red", hash(r1))
	sinkB.WaitCommit(t, "blue", hash(b1))
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
	sinkA.WaitCommit(t, "blue", hash(b1))
	b2 := blue.Commit(t, "blue 2", gittest.File("a", "2"))
	pollNow(t, a, obsA, blue.URL())
	sinkA.WaitCommit(t, "blue", hash(b2))
	for _, c := range sinkB.Delivered() {
		assert.NotEqual(t, hash(b2), c.To, "b no longer delivers blue")
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
	a := newWatcher(t, obsA, watcher.WithShard(shardA), watcher.WithResync(watcher.ResyncEvery(200*time.Millisecond)))
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
	sinkB.WaitCommit(t, "red", hash(r1))
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
	sink.WaitCommit(t, "red-1", hash(r1))
	sink.WaitCommit(t, "red-2", hash(r1))

	shard.set()
	require.Eventually(t, func() bool { return w.Stats().Remotes == 0 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 2, w.Stats().Unowned)
	r2 := red.Commit(t, "red 2", gittest.File("a", "2"))
	shard.set("red")
	sink.WaitCommit(t, "red-1", hash(r2))
	sink.WaitCommit(t, "red-2", hash(r2))
	assert.Empty(t, sink.Removed(), "a remote handed over is not a target gone")
	assert.Len(t, sink.Delivered(), 4, "r1 once each, r2 once each: nothing delivered again")
}

// countingStore counts the reads of a store.
type countingStore struct {
	watcher.Store
	gets atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, key string) (watcher.Checkpoint, bool, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, key)
}

// A deliverer reads its checkpoint once while one poller offers it
// commits, and keeps what it wrote: three commits delivered, one read.
// When the remote comes back from another replica, which delivered
// meanwhile, the checkpoint is read again, and what the other delivered is
// not delivered twice.
func TestCheckpointIsReadOncePerPoller(t *testing.T) {
	srv := gittest.NewServer(t)
	red := srv.NewRepo(t, "g/red")
	store := &countingStore{Store: watcher.NewMemoryStore()}
	target := watcher.Target{ID: "t", URL: red.URL()}
	shardA, shardB := newHandShard("red"), newHandShard()
	obsA, obsB := watchertest.NewObserver(), watchertest.NewObserver()
	sinkA, sinkB := watchertest.NewSink("rec"), watchertest.NewSink("rec")
	a := newWatcher(t, obsA, watcher.WithShard(shardA), watcher.WithStore(store))
	b := newWatcher(t, obsB, watcher.WithShard(shardB), watcher.WithStore(store))
	require.NoError(t, a.Route(watchertest.NewSource(target), sinkA))
	require.NoError(t, b.Route(watchertest.NewSource(target), sinkB))
	c := red.Commit(t, "c1", gittest.File("f", "1"))
	start(t, a)
	start(t, b)
	sinkA.WaitCommit(t, "t", hash(c))
	for i := range 2 {
		c = red.Commit(t, "c", gittest.File("f", strings.Repeat("x", i+2)))
		pollNow(t, a, obsA, red.URL())
		sinkA.WaitCommit(t, "t", hash(c))
	}
	assert.Len(t, sinkA.Delivered(), 3)
	assert.Equal(t, int64(1), store.gets.Load(), "one read for three deliveries")

	// b takes red over and delivers c4; then a takes it back.
	c4 := red.Commit(t, "c4", gittest.File("f", "4"))
	shardA.set()
	shardB.set("red")
	sinkB.WaitCommit(t, "t", hash(c4))
	c4At := time.Now()
	shardB.set()
	shardA.set("red")
	obsA.WaitFor(t, "a finds c4 up to date", func(e watcher.Event) bool {
		return e.Type == watcher.EventPolled && e.Remote == red.URL() && e.Time.After(c4At)
	})
	settle(t, a, obsA, red.URL())
	for _, c := range sinkA.Delivered() {
		assert.NotEqual(t, hash(c4), c.To, "b delivered c4: a reads that and does not deliver it again")
	}
	assert.Equal(t, int64(3), store.gets.Load(), "a new poller reads again (b's first read, then a's)")
}
