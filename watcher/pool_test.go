package watcher_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A target with nothing to deliver costs no goroutine: the deliverers'
// steps run on a pool bounded by the delivery limit, whose workers end
// when there is no work. 2,000 idle targets (two sinks each) run on as
// many goroutines as 10 do.
func TestIdleTargetsCostNoGoroutines(t *testing.T) {
	idle := func(n int) int {
		git, repo := memoryRemote()
		repo.Commit(t, map[string]string{"f": "1"})
		targets := make([]watcher.Target, n)
		for i := range targets {
			targets[i] = watcher.Target{ID: fmt.Sprint(i), URL: repo.URL()}
		}
		a, b := watchertest.NewSink("a"), watchertest.NewSink("b")
		w := newWatcher(t, watchertest.NewObserver(), watcher.WithGit(git))
		require.NoError(t, w.Route(watchertest.NewSource(targets...), a, b))
		stop := watchertest.Run(t, w.Run)
		defer stop()
		a.WaitDelivered(t, n)
		b.WaitDelivered(t, n)
		return settled()
	}
	few := idle(10)
	many := idle(2000)
	assert.LessOrEqual(t, many, few+5, "goroutines of 2,000 idle targets (%d) against 10 (%d)", many, few)
}

// A remote between polls costs no goroutine either: polls run on a pool
// bounded by the listing and fetch limits. 500 remotes run on as many
// goroutines as 5.
func TestIdleRemotesCostNoGoroutines(t *testing.T) {
	idle := func(n int) int {
		git := watchertest.NewGit()
		targets := make([]watcher.Target, n)
		for i := range targets {
			remote := git.Remote(fmt.Sprintf("https://git.example/g/r%d.git", i))
			remote.Commit(t, map[string]string{"f": "1"})
			targets[i] = watcher.Target{ID: fmt.Sprint(i), URL: remote.URL()}
		}
		sink := watchertest.NewSink("rec")
		w := newWatcher(t, watchertest.NewObserver(), watcher.WithGit(git))
		require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
		stop := watchertest.Run(t, w.Run)
		defer stop()
		sink.WaitDelivered(t, n)
		return settled()
	}
	few := idle(5)
	many := idle(500)
	assert.LessOrEqual(t, many, few+5, "goroutines of 500 idle remotes (%d) against 5 (%d)", many, few)
}

// settled is the number of goroutines once it has stopped changing (the
// pool's workers end a moment after the last step).
func settled() int {
	last, same := runtime.NumGoroutine(), 0
	for range 500 {
		time.Sleep(10 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n == last {
			if same++; same == 10 {
				break
			}
			continue
		}
		last, same = n, 0
	}
	return last
}

// The pool runs at most the delivery limit of sink calls at once, and a
// deliverer's calls one at a time, however many targets have work.
func TestDeliveriesAreBoundedAndSerialPerTarget(t *testing.T) {
	const limit, targets = 3, 50
	git, repo := memoryRemote()
	repo.Commit(t, map[string]string{"f": "1"})
	var (
		mu       sync.Mutex
		inFlight = map[string]bool{}
		now, top atomic.Int32
		full     = make(chan struct{})
		fullOnce sync.Once
	)
	sink := watchertest.NewSink("rec")
	sink.SetHook(func(_ context.Context, c watcher.Change) error {
		mu.Lock()
		overlap := inFlight[c.Target.ID]
		inFlight[c.Target.ID] = true
		mu.Unlock()
		assert.False(t, overlap, "two calls at once for %s", c.Target.ID)
		n := now.Add(1)
		for m := top.Load(); n > m && !top.CompareAndSwap(m, n); m = top.Load() {
		}
		// The first calls wait until the limit of them run at once: a pool
		// that ran fewer would never get there.
		if n == limit {
			fullOnce.Do(func() { close(full) })
		}
		select {
		case <-full:
		case <-time.After(10 * time.Second):
			t.Errorf("the pool never ran %d calls at once (at most %d)", limit, top.Load())
			fullOnce.Do(func() { close(full) })
		}
		now.Add(-1)
		mu.Lock()
		inFlight[c.Target.ID] = false
		mu.Unlock()
		return nil
	})
	ts := make([]watcher.Target, targets)
	for i := range ts {
		ts[i] = watcher.Target{ID: fmt.Sprint(i), URL: repo.URL()}
	}
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs, watcher.WithGit(git), watcher.WithConcurrency(watcher.Concurrency{Deliveries: limit}))
	require.NoError(t, w.Route(watchertest.NewSource(ts...), sink))
	start(t, w)
	sink.WaitDelivered(t, targets)
	for range 3 { // new commits while deliveries run: each target gets the latest
		repo.Commit(t, map[string]string{"f": fmt.Sprint(time.Now().UnixNano())})
		w.Trigger(repo.URL())
	}
	last := repo.Commit(t, map[string]string{"f": "last"})
	pollNow(t, w, obs, repo.URL())
	for _, tg := range ts {
		sink.WaitCommit(t, tg.ID, last)
	}
	assert.LessOrEqual(t, top.Load(), int32(limit), "calls at once")
	assert.Equal(t, int32(limit), top.Load(), "the limit is used")
}
