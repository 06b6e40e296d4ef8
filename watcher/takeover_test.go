package watcher_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A watcher that takes over remotes whose targets another delivered (the
// store is shared; its own mirrors are empty) polls them without cloning
// them while it waits for a fetch slot: the deliverers' checkpoints hold
// the commits listed, so nothing is fetched and nothing delivered again.
// What moves later is fetched and delivered as usual.
func TestTakeoverOfDeliveredTargetsNeedsNoClone(t *testing.T) {
	srv := gittest.NewServer(t)
	store := watcher.NewMemoryStore()
	prev := deliveredElsewhere(t, srv, store)

	// The next owner's only fetch slot is taken by a fetch that hangs.
	w, obs, sink, blocker := takeOverBlocked(t, srv, store, prev, time.Hour)

	takenOverUnfetched(t, prev, obs)
	assert.Empty(t, sink.Delivered(), "delivered again")

	// A new commit is fetched and delivered, from the commit the store
	// has (which the mirror never had).
	repo := prev.repos[0]
	c2 := repo.Commit(t, "2", gittest.File("app/f", "changed"))
	srv.Stall(blocker.Name(), -1) // the slot is free again
	w.Trigger(repo.URL())
	got := sink.WaitCommit(t, repo.Name(), hash(c2))
	assert.Equal(t, hash(prev.commits[repo.Name()]), got.From)
	assert.Equal(t, watcher.ReasonNewCommit, got.Reason)
	f, err := readFile(got, "f")
	require.NoError(t, err)
	assert.Equal(t, "changed", f)
	assert.Equal(t, prev.fetches[prev.repos[1].Name()], fetches(prev.repos[1]), "the others stay unfetched")
}

// A replica (a watcher with a shard) that takes over remotes whose targets
// another delivered asks their deliverers before it fetches, even with
// every fetch slot free: nothing is cloned and nothing delivered again.
func TestAReplicaAsksBeforeItClonesWithSlotsFree(t *testing.T) {
	srv := gittest.NewServer(t)
	store := watcher.NewMemoryStore()
	prev := deliveredElsewhere(t, srv, store)
	shard := newHandShard() // another replica polls every remote
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithStore(store), watcher.WithShard(shard))
	require.NoError(t, w.Route(watchertest.NewSource(prev.targets...), sink))
	start(t, w)
	shard.set("g/r") // the previous owner is gone: every remote is this replica's

	takenOverUnfetched(t, prev, obs)
	assert.Empty(t, sink.Delivered(), "delivered again")

	// What moves later is fetched and delivered.
	repo := prev.repos[1]
	c2 := repo.Commit(t, "2", gittest.File("app/f", "changed"))
	w.Trigger(repo.URL())
	got := sink.WaitCommit(t, repo.Name(), hash(c2))
	assert.Equal(t, hash(prev.commits[repo.Name()]), got.From)
}

// A resync of a target taken over unfetched (see above) fetches its commit
// and delivers it.
func TestResyncOfATargetTakenOverUnfetched(t *testing.T) {
	srv := gittest.NewServer(t)
	store := watcher.NewMemoryStore()
	prev := deliveredElsewhere(t, srv, store)
	// The hanging fetch is given up after a while, and the slot freed.
	_, _, sink, _ := takeOverBlocked(t, srv, store, prev, 2*time.Second, watcher.WithResync(watcher.ResyncEvery(500*time.Millisecond)))

	for _, repo := range prev.repos {
		got := sink.WaitDelivery(t, func(c watcher.Change) bool { return c.Target.ID == repo.Name() && c.Reason == watcher.ReasonResync })
		assert.Equal(t, hash(prev.commits[repo.Name()]), got.To)
		f, err := readFile(got, "f")
		require.NoError(t, err)
		assert.Equal(t, repo.Name(), f)
	}
	for _, c := range sink.Delivered() {
		assert.Equal(t, watcher.ReasonResync, c.Reason, "%s delivered for another reason", c.Target.ID)
	}
}

// takeOverBlocked starts a watcher on store with one fetch slot, taken by
// a fetch that hangs (until abort) before prev's targets are given to it.
func takeOverBlocked(t *testing.T, srv *gittest.Server, store watcher.Store, prev previous, abort time.Duration, opts ...watcher.Option) (*watcher.Watcher, *watchertest.Observer, *watchertest.Sink, *gittest.Repo) {
	t.Helper()
	blocker := srv.NewRepo(t, "g/blocker")
	blocker.Commit(t, "1", gittest.File("f", "1"))
	srv.Stall(blocker.Name(), 0)
	t.Cleanup(func() { srv.Stall(blocker.Name(), -1) })
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	src := watchertest.NewSource(watcher.Target{ID: "blocker", URL: blocker.URL()})
	w := newWatcher(t, obs, append([]watcher.Option{watcher.WithStore(store),
		watcher.WithConcurrency(watcher.Concurrency{Fetches: 1}),
		watcher.WithTimeouts(watcher.Timeouts{StallYield: time.Hour, StallAbort: abort})}, opts...)...)
	require.NoError(t, w.Route(src, sink))
	start(t, w)
	require.Eventually(t, func() bool { return fetches(blocker) > 0 }, 30*time.Second, 10*time.Millisecond)
	src.Set(append(prev.targets, watcher.Target{ID: "blocker", URL: blocker.URL()})...)
	return w, obs, sink, blocker
}

// takenOverUnfetched waits for a poll of each of prev's repositories, and
// checks that none of them was fetched since prev's owner stopped.
func takenOverUnfetched(t *testing.T, prev previous, obs *watchertest.Observer) {
	t.Helper()
	for _, repo := range prev.repos {
		obs.WaitFor(t, "a poll of "+repo.Name(), func(e watcher.Event) bool {
			return e.Type == watcher.EventPolled && e.Remote == repo.URL() && e.Err == nil
		})
	}
	for _, repo := range prev.repos {
		assert.Equal(t, prev.fetches[repo.Name()], fetches(repo), "%s fetched", repo.Name())
	}
}

func fetches(repo *gittest.Repo) int64 { return repo.Counts().Fetches.Load() }

// previous is what a first owner delivered.
type previous struct {
	repos   []*gittest.Repo
	targets []watcher.Target
	commits map[string]string // by target ID (the repository's name)
	fetches map[string]int64  // by repository, when it stopped
}

// deliveredElsewhere has a watcher deliver a target on each of four
// repositories, recording in store, and stop.
func deliveredElsewhere(t *testing.T, srv *gittest.Server, store watcher.Store) previous {
	t.Helper()
	p := previous{commits: map[string]string{}, fetches: map[string]int64{}}
	for i := range 4 {
		repo := srv.NewRepo(t, fmt.Sprintf("g/r%d", i))
		p.commits[repo.Name()] = repo.Commit(t, "1", gittest.File("app/f", repo.Name()))
		p.repos = append(p.repos, repo)
		p.targets = append(p.targets, watcher.Target{ID: repo.Name(), URL: repo.URL(), Path: "app"})
	}
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithStore(store))
	require.NoError(t, w.Route(watchertest.NewSource(p.targets...), sink))
	stop := watchertest.Run(t, w.Run)
	for _, tg := range p.targets {
		sink.WaitCommit(t, tg.ID, hash(p.commits[tg.ID]))
	}
	stop()
	for _, repo := range p.repos {
		p.fetches[repo.Name()] = fetches(repo)
	}
	return p
}

// A fetch slot that frees while the deliverers of the remotes in line are
// still being asked whether they need the fetch is not spent on cloning
// one of them: the answers (their checkpoints hold the commits) spare
// every clone. Here the answers are held back until the freed slot has
// served another fetch, which a slot handed to the remotes in line would
// serve only after their clones.
func TestAFreedSlotWaitsForTheAnswersOfTheRemotesInLine(t *testing.T) {
	srv := gittest.NewServer(t)
	mem := watcher.NewMemoryStore()
	prev := deliveredElsewhere(t, srv, mem)
	store := &heldStore{Store: mem, prefix: "g/r", release: make(chan struct{})}
	w, obs, sink, blocker := takeOverBlocked(t, srv, store, prev, time.Hour)

	require.Eventually(t, func() bool { return store.held.Load() == int64(len(prev.targets)) },
		30*time.Second, 10*time.Millisecond, "every orphan's deliverer asked")
	srv.Stall(blocker.Name(), -1) // the blocker's fetch is cut: its slot frees
	obs.WaitFor(t, "the blocker's poll ended", func(e watcher.Event) bool {
		return e.Type == watcher.EventPolled && e.Remote == blocker.URL()
	})
	c2 := blocker.Commit(t, "2", gittest.File("f", "2"))
	w.Trigger(blocker.URL()) // a fetch that needs the freed slot
	sink.WaitCommit(t, "blocker", hash(c2))
	close(store.release)

	takenOverUnfetched(t, prev, obs)
	for _, c := range sink.Delivered() {
		assert.Equal(t, "blocker", c.Target.ID, "delivered again")
	}
}

// heldStore holds back the reads of the keys with prefix until release is
// closed, counting them.
type heldStore struct {
	watcher.Store
	prefix  string
	release chan struct{}
	held    atomic.Int64
}

func (s *heldStore) Get(ctx context.Context, key string) (watcher.Checkpoint, bool, error) {
	if strings.HasPrefix(key, s.prefix) {
		s.held.Add(1)
		select {
		case <-s.release:
		case <-ctx.Done():
			return watcher.Checkpoint{}, false, ctx.Err()
		}
	}
	return s.Store.Get(ctx, key)
}
