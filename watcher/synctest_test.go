package watcher_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// The retry schedule runs on the watcher's default backoff (1s doubling up
// to 5m) in a synctest bubble, so fake time measures the waits exactly and
// the test takes no real time for them.
func TestRetryBackoffSchedule(t *testing.T) {
	git := watchertest.NewGit()
	repo := git.Remote("https://git.example/g/r.git")
	c1 := repo.Commit(t, map[string]string{"f": "1"})
	url := repo.URL()
	cacheDir := t.TempDir()

	synctest.Test(t, func(t *testing.T) {
		const failures = 10
		var attempts []time.Time
		succeeded := make(chan struct{})
		failed := make(chan struct{})
		sink := watchertest.NewSink("flaky")
		sink.SetHook(func(context.Context, watcher.Change) error {
			attempts = append(attempts, time.Now())
			if len(attempts) <= failures {
				if len(attempts) == 1 {
					close(failed)
				}
				return errors.New("not yet")
			}
			close(succeeded)
			return nil
		})
		w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithInterval(time.Hour), watcher.WithGit(git))
		require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: url}), sink))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()

		<-failed
		synctest.Wait() // the deliverer now waits on its retry timer
		assert.Equal(t, watcher.Stats{Targets: 1, Remotes: 1, Retrying: 1, Synced: true}, w.Stats())
		<-succeeded // durably blocked: the bubble's clock jumps to each retry
		synctest.Wait()
		assert.Zero(t, w.Stats().Retrying)
		cancel()
		require.NoError(t, <-done)
		assert.Equal(t, c1, sink.Delivered()[0].To)
		require.Len(t, attempts, failures+1)
		for i := 1; i < len(attempts); i++ {
			gap := attempts[i].Sub(attempts[i-1])
			full := min(time.Second<<(i-1), 5*time.Minute)
			assert.GreaterOrEqual(t, gap, full/2, "wait before attempt %d", i+1)
			assert.LessOrEqual(t, gap, full, "wait before attempt %d", i+1)
		}
	})
}

// A permanent error and a panic are reported once and never retried, however
// long the watcher runs; the next commit is delivered as usual.
func TestPermanentFailuresAndPanicsAreNotRetried(t *testing.T) {
	for name, fail := range map[string]func() error{
		"permanent": func() error { return watcher.Permanent(errors.New("bad manifest")) },
		"panic":     func() error { panic("sink bug") },
	} {
		t.Run(name, func(t *testing.T) {
			git := watchertest.NewGit()
			repo := git.Remote("https://git.example/g/r.git")
			repo.Commit(t, map[string]string{"f": "1"})
			url := repo.URL()
			cacheDir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				var attempts int
				sink := watchertest.NewSink("s")
				sink.SetHook(func(context.Context, watcher.Change) error {
					attempts++
					if attempts == 1 {
						return fail()
					}
					return nil
				})
				obs := watchertest.NewObserver()
				w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithInterval(time.Hour), watcher.WithGit(git),
					watcher.WithObserver(obs))
				require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: url}), sink))
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- w.Run(ctx) }()

				synctest.Wait()
				require.Equal(t, 1, attempts)
				time.Sleep(59 * time.Minute) // past every retry delay, short of the next poll
				synctest.Wait()
				assert.Equal(t, 1, attempts, "a permanent failure is not retried")
				assert.Zero(t, w.Stats().Retrying)
				failed := obs.Events()
				var reported []watcher.Event
				for _, e := range failed {
					if e.Type == watcher.EventDeliveryFailed {
						reported = append(reported, e)
					}
				}
				require.Len(t, reported, 1)
				assert.True(t, watcher.IsPermanent(reported[0].Err))
				if name == "panic" {
					assert.ErrorContains(t, reported[0].Err, "sink panicked: sink bug")
				}

				c2 := repo.Commit(t, map[string]string{"f": "2"})
				w.Trigger(url)
				synctest.Wait()
				assert.Equal(t, 2, attempts)
				assert.Equal(t, c2, sink.Delivered()[0].To, "the next commit is delivered")
				cancel()
				require.NoError(t, <-done)
			})
		})
	}
}

// A target that asks for a 1ms interval is polled at the watcher's floor
// (10s by default), not continuously; WithMinInterval lowers the floor.
func TestIntervalFloor(t *testing.T) {
	git := watchertest.NewGit()
	repo := git.Remote("https://git.example/g/r.git")
	repo.Commit(t, map[string]string{"f": "1"})
	url := repo.URL()

	for name, tc := range map[string]struct {
		opts     []watcher.Option
		min, max int
	}{
		"default floor": {nil, 6, 7},
		"lowered":       {[]watcher.Option{watcher.WithMinInterval(time.Second)}, 55, 67},
	} {
		t.Run(name, func(t *testing.T) {
			cacheDir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				obs := watchertest.NewObserver()
				opts := append([]watcher.Option{watcher.WithCacheDir(cacheDir), watcher.WithGit(git), watcher.WithObserver(obs)}, tc.opts...)
				w := watcher.New(opts...)
				require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: url, Interval: time.Millisecond}), watchertest.NewSink("rec")))
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- w.Run(ctx) }()
				time.Sleep(time.Minute - time.Millisecond)
				synctest.Wait()
				cancel()
				require.NoError(t, <-done)
				polls := obs.Count(watchertest.Is(watcher.EventPolled, ""))
				assert.GreaterOrEqual(t, polls, tc.min)
				assert.LessOrEqual(t, polls, tc.max)
			})
		})
	}
}

// A sink that ignores its ctx holds its delivery slot only for the
// delivery timeout and the grace: the call is abandoned and counted
// failed, other targets get the slot, and Run returns within the grace on
// cancel. (Fake time in a synctest bubble.)
func TestSinkIgnoringContextIsAbandoned(t *testing.T) {
	git := watchertest.NewGit()
	repo := git.Remote("https://git.example/g/r.git")
	c1 := repo.Commit(t, map[string]string{"a/f": "1", "b/f": "1"})
	url := repo.URL()
	cacheDir := t.TempDir()

	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		stuck := make(chan struct{}, 100)
		sink := watchertest.NewSink("rec")
		sink.SetHook(func(_ context.Context, c watcher.Change) error {
			if c.Target.ID == "stuck" {
				stuck <- struct{}{}
				<-release // ignores ctx
			}
			return nil
		})
		failed := make(chan watcher.Event, 100)
		delivered := make(chan watcher.Event, 100)
		obs := watcher.ObserverFunc(func(e watcher.Event) {
			switch e.Type {
			case watcher.EventDeliveryFailed:
				failed <- e
			case watcher.EventDelivered:
				delivered <- e
			}
		})
		w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithInterval(time.Hour), watcher.WithGit(git),
			watcher.WithConcurrency(watcher.Concurrency{Fetches: 1, Deliveries: 1}), watcher.WithTimeouts(watcher.Timeouts{Deliver: time.Minute}), watcher.WithObserver(obs))
		stuckTarget := watcher.Target{ID: "stuck", URL: url, Path: "a"}
		src := watchertest.NewSource(stuckTarget)
		require.NoError(t, w.Route(src, sink))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- w.Run(ctx) }()

		<-stuck
		src.Set(stuckTarget, watcher.Target{ID: "ok", URL: url, Path: "b"}) // waits for the one slot
		e := <-failed
		assert.Equal(t, "stuck", e.Target.ID)
		require.ErrorIs(t, e.Err, watcher.ErrSinkAbandoned)
		assert.Equal(t, time.Minute+30*time.Second, time.Since(start).Round(time.Second), "the timeout, then the grace")
		assert.Equal(t, 1, w.Stats().Abandoned)
		e = <-delivered
		assert.Equal(t, "ok", e.Target.ID, "the slot was freed for the other target")
		assert.Equal(t, c1, e.Commit)

		stopAt := time.Now()
		cancel()
		require.NoError(t, <-done)
		assert.LessOrEqual(t, time.Since(stopAt), 30*time.Second, "Run returns within the grace")
		close(release)
		synctest.Wait()
		assert.Zero(t, w.Stats().Abandoned, "abandoned calls that return are no longer counted")
	})
}

// A mirror no target uses any more is removed once its grace, counted from
// its last poll, is over; the others stay. (Fake time in a synctest bubble.)
func TestUnusedMirrorsAreRemovedAfterGrace(t *testing.T) {
	git := watchertest.NewGit()
	a, b := git.Remote("https://git.example/g/a.git"), git.Remote("https://git.example/g/b.git")
	a.Commit(t, map[string]string{"f": "1"})
	b.Commit(t, map[string]string{"f": "1"})
	ta := watcher.Target{ID: "a", URL: a.URL()}
	tb := watcher.Target{ID: "b", URL: b.URL()}
	cacheDir := t.TempDir()

	synctest.Test(t, func(t *testing.T) {
		polled := make(chan string, 100)
		obs := pollsTo(polled)
		src := watchertest.NewSource(ta, tb)
		w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithInterval(10*time.Minute), watcher.WithGit(git),
			watcher.WithMirrorGrace(time.Hour), watcher.WithObserver(obs))
		require.NoError(t, w.Route(src, watchertest.NewSink("rec")))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		<-polled
		<-polled
		synctest.Wait()
		require.Len(t, mirrorDirs(t, cacheDir), 2)

		src.Set(ta)
		time.Sleep(50 * time.Minute)
		synctest.Wait()
		assert.Len(t, mirrorDirs(t, cacheDir), 2, "within the grace")
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		dirs := mirrorDirs(t, cacheDir)
		require.Len(t, dirs, 1, "the unused mirror is gone, the used one stays")
		cancel()
		require.NoError(t, <-done)

		// Hours later, a restart whose source is slow to give its set takes
		// no mirror for unused meanwhile.
		time.Sleep(3 * time.Hour)
		gate := make(chan struct{})
		slow := sourceFunc(func(ctx context.Context, update func([]watcher.Target)) error {
			select {
			case <-gate:
				update([]watcher.Target{ta})
			case <-ctx.Done():
			}
			<-ctx.Done()
			return nil
		})
		w = watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithInterval(10*time.Minute), watcher.WithGit(git),
			watcher.WithMirrorGrace(time.Hour), watcher.WithObserver(obs))
		require.NoError(t, w.Route(slow, watchertest.NewSink("rec")))
		ctx, cancel = context.WithCancel(t.Context())
		go func() { done <- w.Run(ctx) }()
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		assert.Equal(t, dirs, mirrorDirs(t, cacheDir), "not collected before the source gave its set")
		close(gate)
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		assert.Equal(t, dirs, mirrorDirs(t, cacheDir), "still used")
		cancel()
		require.NoError(t, <-done)
	})
}

// A mirror's time records its last use without a system call on every
// poll: a poll sets it when it is an eighth of the grace old, and a remote
// sets it when it ends. (Fake time in a synctest bubble.)
func TestAMirrorIsMarkedUsedOncePerEighthOfGraceAndWhenItsRemoteEnds(t *testing.T) {
	git, r := memoryRemote()
	r.Commit(t, map[string]string{"f": "1"})
	target := watcher.Target{ID: "a", URL: r.URL()}
	cacheDir := t.TempDir()

	synctest.Test(t, func(t *testing.T) {
		polled := make(chan string, 100)
		src := watchertest.NewSource(target)
		w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithInterval(time.Minute), watcher.WithMinInterval(time.Minute),
			watcher.WithGit(git), watcher.WithMirrorGrace(time.Hour), watcher.WithObserver(pollsTo(polled)))
		require.NoError(t, w.Route(src, watchertest.NewSink("rec")))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		<-polled
		synctest.Wait()
		dirs := mirrorDirs(t, cacheDir)
		require.Len(t, dirs, 1)
		modified := func() time.Time {
			info, err := os.Stat(dirs[0])
			require.NoError(t, err)
			return info.ModTime()
		}
		first := modified()

		time.Sleep(5 * time.Minute)
		synctest.Wait()
		assert.GreaterOrEqual(t, len(polled), 4, "polls (jittered)")
		assert.Equal(t, first, modified(), "polled within an eighth of the grace")

		time.Sleep(4 * time.Minute)
		synctest.Wait()
		assert.WithinRange(t, modified(), first.Add(time.Hour/8), time.Now(), "the first poll an eighth of the grace later")

		time.Sleep(30 * time.Second)
		src.Set()
		synctest.Wait()
		assert.Equal(t, time.Now(), modified(), "the remote ended")
		cancel()
		require.NoError(t, <-done)
	})
}

// sourceFunc is a watcher.Source made of its Run.
type sourceFunc func(ctx context.Context, update func([]watcher.Target)) error

func (f sourceFunc) Run(ctx context.Context, update func([]watcher.Target)) error {
	return f(ctx, update)
}

// WithResync's period is asked at the start and after each resync:
// off (0) it is asked again a minute later, and a resync happens only when
// it says so, on fake time.
func TestResyncFuncIsAskedAgain(t *testing.T) {
	git := watchertest.NewGit()
	repo := git.Remote("https://git.example/g/r.git")
	repo.Commit(t, map[string]string{"f": "1"})
	url := repo.URL()
	cacheDir := t.TempDir()

	synctest.Test(t, func(t *testing.T) {
		var interval atomic.Int64 // 0: off
		asked := make(chan time.Time, 16)
		resynced := make(chan time.Time, 16)
		sink := watchertest.NewSink("rec")
		sink.SetHook(func(_ context.Context, c watcher.Change) error {
			if c.Reason == watcher.ReasonResync {
				resynced <- time.Now()
			}
			return nil
		})
		w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithInterval(time.Hour), watcher.WithGit(git),
			watcher.WithResync(func() time.Duration {
				asked <- time.Now()
				return time.Duration(interval.Load())
			}))
		require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: url}), sink))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()

		start := <-asked
		sink.WaitDelivered(t, 1)
		second := <-asked
		assert.Equal(t, time.Minute, second.Sub(start), "off: asked again a minute later")
		assert.Empty(t, resynced, "no resync while off")
		interval.Store(int64(10 * time.Minute))
		third := <-asked
		assert.Equal(t, time.Minute, third.Sub(second))
		at := <-resynced
		assert.Equal(t, 10*time.Minute, at.Sub(third), "on: the resync at the interval it said")
		cancel()
		require.NoError(t, <-done)
	})
}

// A mirror being opened (outside the watcher's lock, a takeover opens
// hundreds) is not collected meanwhile, however old: here its open hangs
// across collections, and its directory stays.
func TestAMirrorBeingOpenedIsNotCollected(t *testing.T) {
	git := watchertest.NewGit()
	a := git.Remote("https://git.example/g/a.git")
	a.Commit(t, map[string]string{"f": "1"})
	ta := watcher.Target{ID: "a", URL: a.URL()}
	cacheDir := t.TempDir()

	synctest.Test(t, func(t *testing.T) {
		polled := make(chan string, 100)
		obs := pollsTo(polled)
		run := func(g watcher.Git) (stop func()) {
			w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithInterval(10*time.Minute), watcher.WithGit(g),
				watcher.WithMirrorGrace(time.Hour), watcher.WithObserver(obs))
			require.NoError(t, w.Route(watchertest.NewSource(ta), watchertest.NewSink("rec")))
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			return func() {
				cancel()
				require.NoError(t, <-done)
			}
		}
		stop := run(git)
		<-polled
		synctest.Wait()
		dirs := mirrorDirs(t, cacheDir)
		require.Len(t, dirs, 1)
		stop()

		time.Sleep(3 * time.Hour) // the mirror is past its grace
		gate := make(chan struct{})
		stop = run(slowOpen{Git: git, gate: gate})
		time.Sleep(2 * time.Hour) // collections come and go while it opens
		synctest.Wait()
		assert.Equal(t, dirs, mirrorDirs(t, cacheDir), "collected while it opened")
		close(gate)
		<-polled
		synctest.Wait()
		assert.Equal(t, dirs, mirrorDirs(t, cacheDir))
		stop()
	})
}

// pollsTo is an observer that sends the remote of each poll to polled.
func pollsTo(polled chan<- string) watcher.Observer {
	return watcher.ObserverFunc(func(e watcher.Event) {
		if e.Type == watcher.EventPolled {
			polled <- e.Remote
		}
	})
}

// slowOpen is a git whose mirrors open once gate is closed.
type slowOpen struct {
	watcher.Git
	gate chan struct{}
}

func (g slowOpen) OpenMirror(dir, url string, opts mirror.Options) (watcher.Mirror, error) {
	<-g.gate
	return g.Git.OpenMirror(dir, url, opts)
}

// A target given again with a longer interval (git-sync's --init-period,
// then --period) is next polled that interval after its last poll, not at
// once, nor when the timer set for the shorter one fires; one given a
// shorter interval is polled at once.
func TestIntervalChange(t *testing.T) {
	git := watchertest.NewGit()
	repo := git.Remote("https://git.example/g/r.git")
	repo.Commit(t, map[string]string{"f": "1"})
	url := repo.URL()
	cacheDir := t.TempDir()

	synctest.Test(t, func(t *testing.T) {
		obs := watchertest.NewObserver()
		src := watchertest.NewSource(watcher.Target{ID: "t", URL: url, Interval: time.Second})
		w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithGit(git), watcher.WithObserver(obs),
			watcher.WithInterval(time.Hour), watcher.WithMinInterval(time.Second), watcher.WithJitter(0))
		require.NoError(t, w.Route(src, watchertest.NewSink("rec")))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		polls := func() int { return obs.Count(watchertest.Is(watcher.EventPolled, "")) }

		synctest.Wait()
		require.Equal(t, 1, polls(), "the first poll is at once")
		time.Sleep(500 * time.Millisecond)
		src.Set(watcher.Target{ID: "t", URL: url, Interval: 10 * time.Minute})
		synctest.Wait()
		assert.Equal(t, 1, polls(), "a longer interval polls nothing at once")
		time.Sleep(10*time.Minute - 500*time.Millisecond - time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 1, polls(), "nor before the longer interval is over")
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 2, polls(), "then it polls")

		src.Set(watcher.Target{ID: "t", URL: url, Interval: time.Second})
		synctest.Wait()
		assert.Equal(t, 3, polls(), "a shorter interval polls at once")
		cancel()
		require.NoError(t, <-done)
	})
}
