package watcher_test

import (
	"context"
	"fmt"
	"slices"
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

// batchStore is a BatchStore over a store, counting its reads.
type batchStore struct {
	watcher.Store
	gets    atomic.Int64
	mu      sync.Mutex
	batches [][]string
}

func (s *batchStore) Get(ctx context.Context, key string) (watcher.Checkpoint, bool, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, key)
}

func (s *batchStore) GetMany(ctx context.Context, keys []string) ([]watcher.Lookup, error) {
	s.mu.Lock()
	s.batches = append(s.batches, slices.Clone(keys))
	s.mu.Unlock()
	out := make([]watcher.Lookup, len(keys))
	for i, k := range keys {
		cp, ok, err := s.Store.Get(ctx, k)
		out[i] = watcher.Lookup{Checkpoint: cp, OK: ok, Err: err}
	}
	return out, nil
}

// A watcher whose store is a BatchStore reads the checkpoints of the
// targets of the remotes it starts with in one GetMany, not a Get each;
// what they say holds (nothing is delivered again), and a commit pushed
// after is delivered without another read.
func TestRemotesStartingTogetherReadTheirCheckpointsTogether(t *testing.T) {
	srv := gittest.NewServer(t)
	mem := watcher.NewMemoryStore()
	var targets []watcher.Target
	var repos []*gittest.Repo
	var heads []string
	for i := range 4 {
		r := srv.NewRepo(t, fmt.Sprint("g/r", i))
		heads = append(heads, r.Commit(t, "c1", gittest.File("f", "1")))
		repos = append(repos, r)
		for j := range 3 {
			targets = append(targets, watcher.Target{ID: fmt.Sprintf("t-%d-%d", i, j), URL: r.URL()})
		}
	}
	first := watchertest.NewSink("rec")
	w := newWatcher(t, watchertest.NewObserver(), watcher.WithStore(mem))
	require.NoError(t, w.Route(watchertest.NewSource(targets...), first))
	stop := watchertest.Run(t, w.Run)
	for i, tg := range targets {
		first.WaitCommit(t, tg.ID, hash(heads[i/3]))
	}
	stop()

	store := &batchStore{Store: mem}
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w = newWatcher(t, obs, watcher.WithStore(store))
	require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
	start(t, w)
	require.Eventually(t, func() bool { return w.Stats().Remotes == len(repos) }, 10*time.Second, 5*time.Millisecond)
	for _, r := range repos {
		settle(t, w, obs, r.URL())
	}
	assert.Empty(t, sink.Delivered(), "every checkpoint holds its commit")
	assert.Zero(t, store.gets.Load(), "no checkpoint read alone")
	store.mu.Lock()
	require.Len(t, store.batches, 1)
	assert.Len(t, store.batches[0], len(targets))
	store.mu.Unlock()

	c2 := repos[2].Commit(t, "c2", gittest.File("f", "2"))
	pollNow(t, w, obs, repos[2].URL())
	for j := range 3 {
		sink.WaitCommit(t, fmt.Sprintf("t-2-%d", j), hash(c2))
	}
	assert.Zero(t, store.gets.Load(), "a checkpoint read together is known after")
}
