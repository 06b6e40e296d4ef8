package watcher_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, gittest.LeakOptions...)
}

// start runs w until the test ends and checks that Run returns cleanly.
func start(t *testing.T, w *watcher.Watcher) {
	t.Helper()
	watchertest.Run(t, w.Run)
}

// startLogging starts w with log in its context, where the watcher takes
// its logger from.
func startLogging(t *testing.T, w *watcher.Watcher, log logr.Logger) (stop func()) {
	t.Helper()
	return watchertest.Run(t, func(ctx context.Context) error { return w.Run(logr.NewContext(ctx, log)) })
}

// newWatcher has a long interval, so that polls happen only at start, when
// targets change and on Trigger, and fast retries.
func newWatcher(t *testing.T, obs *watchertest.Observer, opts ...watcher.Option) *watcher.Watcher {
	return newWatcherIn(t, obs, t.TempDir(), opts...)
}

// newWatcherIn is newWatcher with its cache in dir.
func newWatcherIn(t *testing.T, obs *watchertest.Observer, dir string, opts ...watcher.Option) *watcher.Watcher {
	base := []watcher.Option{
		watcher.WithCacheDir(dir),
		watcher.WithInterval(time.Hour),
		watcher.WithRetryBackoff(watcher.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}),
		watcher.WithObserver(obs),
	}
	return watcher.New(append(base, opts...)...)
}

// pollNow triggers a poll of url and waits for a poll that started after
// the trigger to finish (one already running when triggered does not count).
func pollNow(t *testing.T, w *watcher.Watcher, obs *watchertest.Observer, url string) {
	t.Helper()
	t0 := time.Now()
	require.True(t, w.Trigger(url), "no remote matches %s", url)
	obs.WaitFor(t, "a poll after the trigger", func(e watcher.Event) bool {
		return e.Type == watcher.EventPolled && !e.Time.Add(-e.Duration).Before(t0)
	})
}

// settle waits for a poll after all that is pending, so that counters read
// next are not moved by a poll still in flight.
func settle(t *testing.T, w *watcher.Watcher, obs *watchertest.Observer, url string) {
	t.Helper()
	pollNow(t, w, obs, url)
}

func TestOneListingPerRemotePerCycle(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/mono")
	const n = 20
	var changes []gittest.Change
	var targets []watcher.Target
	for i := range n {
		changes = append(changes, gittest.File(fmt.Sprintf("apps/%d/cm.yaml", i), "v1"))
		targets = append(targets, watcher.Target{ID: fmt.Sprintf("app-%d", i), URL: repo.URL(), Revision: "main", Path: fmt.Sprintf("apps/%d", i)})
	}
	c1 := repo.Commit(t, "init", changes...)

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	// Two routes on the same repository share its poller.
	require.NoError(t, w.Route(watchertest.NewSource(targets[:n/2]...), sink))
	require.NoError(t, w.Route(watchertest.NewSource(targets[n/2:]...), sink))
	start(t, w)
	for _, c := range sink.WaitDelivered(t, n) {
		assert.Equal(t, hash(c1), c.To)
		assert.Equal(t, watcher.ReasonInitial, c.Reason)
	}
	obs.WaitCount(t, "the delivery events", n, watchertest.Is(watcher.EventDelivered, ""))
	for _, e := range obs.Events() {
		if e.Type == watcher.EventDelivered {
			assert.False(t, e.Seen.IsZero(), "delivery events say when the commit was seen")
			assert.False(t, e.Time.Before(e.Seen))
		}
	}
	assert.Positive(t, obs.Count(watchertest.Is(watcher.EventListed, "")))

	settle(t, w, obs, repo.URL())
	lists, fetches := repo.Counts().Lists.Load(), repo.Counts().Fetches.Load()
	for range 3 {
		pollNow(t, w, obs, repo.URL())
	}
	assert.Equal(t, lists+3, repo.Counts().Lists.Load(), "one ref listing per cycle for %d targets", n)
	assert.Equal(t, fetches, repo.Counts().Fetches.Load(), "nothing moved: nothing fetched")
	assert.Len(t, sink.Delivered(), n)

	// One commit touching one app: one fetch, one delivery.
	c2 := repo.Commit(t, "bump 3", gittest.File("apps/3/cm.yaml", "v2"))
	pollNow(t, w, obs, repo.URL())
	got := sink.WaitCommit(t, "app-3", hash(c2))
	assert.Equal(t, watcher.ReasonNewCommit, got.Reason)
	assert.Equal(t, hash(c1), got.From)
	assert.Equal(t, []string{"cm.yaml"}, got.Paths)
	assert.Equal(t, fetches+1, repo.Counts().Fetches.Load())
	assert.Equal(t, lists+4, repo.Counts().Lists.Load(), "the fetch reuses the poll's listing: no second ref advertisement")
	// Every other app is up to date at c2 without a delivery.
	obs.WaitCount(t, "the others up to date", n-1, watchertest.Is(watcher.EventUpToDate, ""))
	assert.Len(t, sink.Delivered(), n+1)
}

func TestCommitOutsidePathIsNotDelivered(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "init", gittest.File("deploy/app.yaml", "a"), gittest.File("docs/README", "x"))

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL(), Path: "deploy"}), sink))
	start(t, w)
	first := sink.WaitCommit(t, "t", hash(c1))
	data, err := readFile(first, "app.yaml")
	require.NoError(t, err)
	assert.Equal(t, "a", data)

	c2 := repo.Commit(t, "docs only", gittest.File("docs/README", "y"))
	pollNow(t, w, obs, repo.URL())
	e := obs.WaitFor(t, "up to date at c2", func(e watcher.Event) bool {
		return e.Type == watcher.EventUpToDate && e.Commit == hash(c2)
	})
	assert.Equal(t, "rec", e.Sink)
	assert.Len(t, sink.Delivered(), 1, "a commit outside Path is not delivered")

	// The next change inside the path is diffed against what was delivered.
	c3 := repo.Commit(t, "app", gittest.File("deploy/app.yaml", "b"))
	pollNow(t, w, obs, repo.URL())
	got := sink.WaitCommit(t, "t", hash(c3))
	assert.Equal(t, hash(c2), got.From, "the checkpoint recorded c2")
	assert.Equal(t, []string{"app.yaml"}, got.Paths)
}

// Several paths and ignore patterns: a commit that changes only what they
// leave out is not delivered, and what is delivered leaves it out.
func TestPathsAndIgnorePatterns(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "init",
		gittest.File("apps/app.yaml", "a"),
		gittest.File("infra/db.yaml", "d"), gittest.File("infra/.sourceignore", "tmp/\n"),
		gittest.File("infra/tmp/scratch.yaml", "s"), gittest.File("docs/README", "x"))

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	target := watcher.Target{ID: "t", URL: repo.URL(), Paths: []string{"apps/", "infra"}, Ignore: []string{"*.md"}, IgnoreFile: ".sourceignore"}
	require.NoError(t, w.Route(watchertest.NewSource(target), sink))
	start(t, w)
	first := sink.WaitCommit(t, "t", hash(c1))
	var got []string
	require.NoError(t, fs.WalkDir(first.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			got = append(got, p)
		}
		return err
	}))
	assert.Equal(t, []string{"apps/app.yaml", "infra/.sourceignore", "infra/db.yaml"}, got)

	// apps/ had nothing hidden: a hidden file added is the same as none.
	c2 := repo.Commit(t, "hidden only", gittest.File("docs/README", "y"), gittest.File("apps/notes.md", "m"), gittest.File("infra/tmp/scratch.yaml", "t"))
	pollNow(t, w, obs, repo.URL())
	obs.WaitFor(t, "up to date at c2", func(e watcher.Event) bool {
		return e.Type == watcher.EventUpToDate && e.Commit == hash(c2)
	})
	assert.Len(t, sink.Delivered(), 1, "a commit that changes only what is left out is not delivered")

	c3 := repo.Commit(t, "kept and hidden", gittest.File("infra/db.yaml", "d2"), gittest.File("apps/notes.md", "o"))
	pollNow(t, w, obs, repo.URL())
	last := sink.WaitCommit(t, "t", hash(c3))
	assert.Equal(t, hash(c2), last.From)
	assert.Equal(t, []string{"infra/db.yaml"}, last.Paths)
}

func TestLatestWins(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("slow")
	release := make(chan struct{})
	var calls atomic.Int32
	sink.SetHook(func(ctx context.Context, c watcher.Change) error {
		if calls.Add(1) == 1 {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL()}), sink))
	start(t, w)
	sink.WaitAttempts(t, 1) // busy with c1

	var last string
	for i := 2; i <= 4; i++ {
		last = repo.Commit(t, fmt.Sprint(i), gittest.File("f", fmt.Sprint(i)))
		pollNow(t, w, obs, repo.URL())
	}
	close(release)
	got := sink.WaitCommit(t, "t", hash(last))
	assert.Equal(t, hash(c1), got.From)
	ds := sink.Delivered()
	require.Len(t, ds, 2, "the sink sees the first and the last commit only")
	assert.Equal(t, hash(c1), ds[0].To)
	assert.Equal(t, hash(last), ds[1].To)
}

func TestFailingSinkIsRetriedAndCheckpointWaits(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))

	obs := watchertest.NewObserver()
	store := watcher.NewMemoryStore()
	sink := watchertest.NewSink("flaky")
	var fails atomic.Int32
	fails.Store(3)
	sink.SetHook(func(context.Context, watcher.Change) error {
		if fails.Add(-1) >= 0 {
			return errors.New("apiserver unavailable")
		}
		return nil
	})
	w := newWatcher(t, obs, watcher.WithStore(store))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL()}), sink))
	start(t, w)

	obs.WaitCount(t, "three failures", 3, watchertest.Is(watcher.EventDeliveryFailed, "t"))
	failed := obs.Events()
	for _, e := range failed {
		if e.Type == watcher.EventDeliveryFailed {
			assert.ErrorContains(t, e.Err, "apiserver unavailable")
		}
	}
	sink.WaitCommit(t, "t", hash(c1))
	// The checkpoint is written after the sink returns, before the event.
	obs.WaitFor(t, "the delivery event", watchertest.Is(watcher.EventDelivered, "t"))
	cp, ok, err := store.Get(context.Background(), "t/flaky")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, hash(c1), cp.Commit)
	assert.Len(t, sink.Attempts(), 4)
	var attempts []int
	for _, e := range obs.Events() {
		if e.Type == watcher.EventDeliveryFailed {
			attempts = append(attempts, e.Attempt)
		}
	}
	assert.Equal(t, []int{1, 2, 3}, attempts)
}

func TestCheckpointDoesNotMoveOnFailure(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))

	obs := watchertest.NewObserver()
	store := watcher.NewMemoryStore()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithStore(store), watcher.WithRetryBackoff(watcher.Backoff{Min: time.Hour, Max: time.Hour}))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL()}), sink))
	start(t, w)
	sink.WaitCommit(t, "t", hash(c1))

	sink.SetHook(func(context.Context, watcher.Change) error { return errors.New("boom") })
	c2 := repo.Commit(t, "2", gittest.File("f", "2"))
	pollNow(t, w, obs, repo.URL())
	obs.WaitFor(t, "a failure", watchertest.Is(watcher.EventDeliveryFailed, "t"))
	cp, _, err := store.Get(context.Background(), "t/rec")
	require.NoError(t, err)
	assert.Equal(t, hash(c1), cp.Commit, "the checkpoint stays at the last success")

	// A permanent error is reported once and not retried.
	sink.SetHook(func(context.Context, watcher.Change) error { return watcher.Permanent(errors.New("bad manifest")) })
	c3 := repo.Commit(t, "3", gittest.File("f", "3"))
	pollNow(t, w, obs, repo.URL())
	e := obs.WaitFor(t, "a permanent failure", func(e watcher.Event) bool {
		return e.Type == watcher.EventDeliveryFailed && e.Commit == hash(c3)
	})
	assert.True(t, watcher.IsPermanent(e.Err))
	_ = c2
}

func TestRestartWithFileStoreDoesNotRedeliver(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	storeDir, cacheDir := t.TempDir(), t.TempDir()
	target := watcher.Target{ID: "t", URL: repo.URL()}

	run := func(t *testing.T, sink *watchertest.Sink, obs *watchertest.Observer) (stop func()) {
		store, err := watcher.NewFileStore(storeDir)
		require.NoError(t, err)
		w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithStore(store), watcher.WithInterval(time.Hour), watcher.WithObserver(obs))
		require.NoError(t, w.Route(watchertest.NewSource(target), sink))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		return func() { cancel(); require.NoError(t, <-done) }
	}

	sink1 := watchertest.NewSink("rec")
	stop := run(t, sink1, watchertest.NewObserver())
	sink1.WaitCommit(t, "t", hash(c1))
	stop()

	sink2, obs2 := watchertest.NewSink("rec"), watchertest.NewObserver()
	stop = run(t, sink2, obs2)
	obs2.WaitFor(t, "a poll", watchertest.Is(watcher.EventPolled, ""))
	stop()
	assert.Empty(t, sink2.Attempts(), "the store says c1 was delivered")

	c2 := repo.Commit(t, "2", gittest.File("f", "2"))
	sink3 := watchertest.NewSink("rec")
	stop = run(t, sink3, watchertest.NewObserver())
	got := sink3.WaitCommit(t, "t", hash(c2))
	stop()
	assert.Equal(t, hash(c1), got.From)
	assert.Equal(t, watcher.ReasonNewCommit, got.Reason)
}

func TestForcePushIsReported(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	base := repo.Commit(t, "base", gittest.File("f", "0"))
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL(), Revision: "main"}), sink))
	start(t, w)
	sink.WaitCommit(t, "t", hash(c1))

	repo.Reset(t, base)
	rewritten := repo.Commit(t, "rewritten", gittest.File("f", "2"))
	pollNow(t, w, obs, repo.URL())
	got := sink.WaitCommit(t, "t", hash(rewritten))
	assert.Equal(t, watcher.ReasonForcePush, got.Reason)
	assert.Equal(t, hash(c1), got.From)
	e := obs.WaitFor(t, "the delivery event", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Commit == hash(rewritten)
	})
	assert.Equal(t, watcher.ReasonForcePush, e.Change.Reason)
}

func TestRemovedTargetCallsRemove(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("a/f", "1"), gittest.File("b/f", "1"))

	obs := watchertest.NewObserver()
	store := watcher.NewMemoryStore()
	sink := watchertest.NewSink("rec")
	src := watchertest.NewSource(
		watcher.Target{ID: "a", URL: repo.URL(), Path: "a"},
		watcher.Target{ID: "b", URL: repo.URL(), Path: "b"})
	w := newWatcher(t, obs, watcher.WithStore(store))
	require.NoError(t, w.Route(src, sink))
	start(t, w)
	sink.WaitDelivered(t, 2)

	src.Set(watcher.Target{ID: "a", URL: repo.URL(), Path: "a"})
	sink.WaitRemoved(t, "b")
	assert.Equal(t, "b", sink.Removed()[0].Path)
	obs.WaitFor(t, "removed event", watchertest.Is(watcher.EventRemoved, "b"))
	_, ok, err := store.Get(context.Background(), "b/rec")
	require.NoError(t, err)
	assert.False(t, ok, "the checkpoint is forgotten")

	// Changing a target's path delivers it again as a changed target.
	src.Set(watcher.Target{ID: "a", URL: repo.URL(), Path: "b"})
	got := sink.WaitDelivery(t, func(c watcher.Change) bool { return c.Reason == watcher.ReasonTargetChanged })
	assert.Equal(t, "a", got.Target.ID)
	assert.Equal(t, hash(c1), got.To)
	assert.Empty(t, sink.Removed()[1:], "a changed target is not removed")
}

func TestTriggerPollsAtOnce(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("f", "1"))
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs) // an hour between polls
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL()}), sink))
	assert.False(t, w.Trigger(repo.URL()), "nothing is watched before Run")
	start(t, w)
	sink.WaitDelivered(t, 1)

	c2 := repo.Commit(t, "2", gittest.File("f", "2"))
	// Any form of the URL matches the remote.
	require.True(t, w.Trigger(repo.URL()+"/"))
	sink.WaitCommit(t, "t", hash(c2))
	assert.False(t, w.Trigger("https://elsewhere.example.com/x/y"))
}

func TestBadTargetsDoNotStopOthers(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(
		watcher.Target{ID: "good", URL: repo.URL()},
		watcher.Target{ID: "bad-rev", URL: repo.URL(), Revision: "no-such-branch"},
		watcher.Target{ID: "bad-path", URL: repo.URL(), Path: "missing"},
		watcher.Target{ID: "unreachable", URL: "http://127.0.0.1:1/nothing.git"},
		watcher.Target{ID: "invalid", URL: "ftp://x/y"},
	), sink))
	start(t, w)
	sink.WaitCommit(t, "good", hash(c1))
	for _, id := range []string{"bad-rev", "bad-path", "unreachable"} {
		e := obs.WaitFor(t, id+" failed", watchertest.Is(watcher.EventTargetFailed, id))
		assert.Error(t, e.Err, id)
	}
	e := obs.WaitFor(t, "invalid reported", watchertest.Is(watcher.EventInvalidTarget, "invalid"))
	assert.ErrorIs(t, e.Err, watcher.ErrInvalidTarget)
	obs.WaitFor(t, "the unreachable remote's failed poll", func(e watcher.Event) bool {
		return e.Type == watcher.EventPolled && e.Err != nil
	})

	// The good target keeps going.
	c2 := repo.Commit(t, "2", gittest.File("f", "2"))
	pollNow(t, w, obs, repo.URL())
	sink.WaitCommit(t, "good", hash(c2))
	assert.Len(t, sink.Delivered(), 2)
}

func TestVanishedRefIsReported(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("f", "1"))
	repo.Checkout(t, "feature")
	c2 := repo.Commit(t, "2", gittest.File("f", "2"))
	repo.Checkout(t, "main")

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL(), Revision: "feature"}), sink))
	start(t, w)
	sink.WaitCommit(t, "t", hash(c2))

	repo.DeleteRef(t, "refs/heads/feature")
	pollNow(t, w, obs, repo.URL())
	e := obs.WaitFor(t, "vanished", watchertest.Is(watcher.EventRefVanished, "t"))
	assert.Equal(t, "refs/heads/feature", e.Ref)
}

func TestResyncRedelivers(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithResync(watcher.ResyncEvery(50*time.Millisecond)))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL()}), sink))
	start(t, w)
	got := sink.WaitDelivery(t, func(c watcher.Change) bool { return c.Reason == watcher.ReasonResync })
	assert.Equal(t, hash(c1), got.To)
	assert.Equal(t, hash(c1), got.From)
}

func TestRouteAndRunErrors(t *testing.T) {
	w := watcher.New(watcher.WithCacheDir(t.TempDir()))
	require.ErrorIs(t, w.Run(context.Background()), watcher.ErrNoRoutes)
	require.ErrorIs(t, w.Route(watchertest.NewSource(), watchertest.NewSink("s")), watcher.ErrStarted)

	w = watcher.New(watcher.WithCacheDir(t.TempDir()))
	require.Error(t, w.Route(watchertest.NewSource()))
	boom := errors.New("source broke")
	require.NoError(t, w.Route(watcher.SourceFunc(func(context.Context, func([]watcher.Target)) error { return boom }), watchertest.NewSink("s")))
	require.ErrorIs(t, w.Run(context.Background()), boom, "a failing source stops the watcher")
}

func TestCommitPinnedTargetNeedsNoListing(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	repo.Commit(t, "2", gittest.File("f", "2")) // c1 is no longer a branch tip
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "pinned", URL: repo.URL(), Revision: c1}), sink))
	start(t, w)
	got := sink.WaitCommit(t, "pinned", hash(c1))
	assert.Empty(t, got.Ref)
	assert.Equal(t, repo.Counts().Fetches.Load(), repo.Counts().Lists.Load(), "no listing but the one inside the fetch by SHA")

	settle(t, w, obs, repo.URL())
	lists, fetches := repo.Counts().Lists.Load(), repo.Counts().Fetches.Load()
	pollNow(t, w, obs, repo.URL())
	assert.Equal(t, lists, repo.Counts().Lists.Load(), "a commit-pinned target in the mirror needs no listing")
	assert.Equal(t, fetches, repo.Counts().Fetches.Load())
}

func TestPrivateRepositoryThroughCredentials(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "team/private")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	srv.SetBasicAuth("deploy", "right-pw")

	good, err := gitutil.NewStaticCredentials(map[string]*gitutil.Auth{
		srv.URL() + "/team": {Username: "deploy", Password: "right-pw", AllowInsecureHTTP: true},
	})
	require.NoError(t, err)
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithCredentials(good))
	require.NoError(t, w.Route(watchertest.NewSource(
		watcher.Target{ID: "resolved", URL: repo.URL()},
		watcher.Target{ID: "own-auth", URL: repo.URL(), Auth: &gitutil.Auth{Username: "deploy", Password: "wrong-pw", AllowInsecureHTTP: true}},
	), sink))
	start(t, w)
	sink.WaitCommit(t, "resolved", hash(c1))
	e := obs.WaitFor(t, "the wrong password fails", watchertest.Is(watcher.EventTargetFailed, "own-auth"))
	assert.NotContains(t, e.Err.Error(), "wrong-pw")
	assert.NotContains(t, e.String(), "wrong-pw")
}

func TestLockedMirrorIsRebuiltWithoutRedelivery(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	cacheDir := t.TempDir()
	store := watcher.NewMemoryStore()
	target := watcher.Target{ID: "t", URL: repo.URL()}
	runOnce := func(sink *watchertest.Sink, obs *watchertest.Observer, until func()) {
		w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithStore(store), watcher.WithInterval(time.Hour), watcher.WithObserver(obs))
		require.NoError(t, w.Route(watchertest.NewSource(target), sink))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		until()
		cancel()
		require.NoError(t, <-done)
	}
	sink := watchertest.NewSink("rec")
	runOnce(sink, watchertest.NewObserver(), func() { sink.WaitCommit(t, "t", hash(c1)) })

	// A crash left a lock file in the mirror.
	mirrors := mirrorDirs(t, cacheDir)
	require.Len(t, mirrors, 1)
	require.NoError(t, os.WriteFile(filepath.Join(mirrors[0], "shallow.lock"), nil, 0o644))

	obs, sink2 := watchertest.NewObserver(), watchertest.NewSink("rec")
	runOnce(sink2, obs, func() {
		e := obs.WaitFor(t, "the rebuild", watchertest.Is(watcher.EventMirrorRebuilt, ""))
		assert.ErrorContains(t, e.Err, "shallow.lock")
		obs.WaitFor(t, "a poll", watchertest.Is(watcher.EventPolled, ""))
	})
	assert.Empty(t, sink2.Attempts(), "the delivered state survives the rebuild")
	assert.NoFileExists(t, filepath.Join(mirrors[0], "shallow.lock"))
}

func TestRemotesAndTheirChanges(t *testing.T) {
	srv := gittest.NewServer(t)
	a, b := srv.NewRepo(t, "g/a"), srv.NewRepo(t, "g/b")
	a.Commit(t, "1", gittest.File("f", "1"))
	b.Commit(t, "1", gittest.File("f", "1"))
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	src := watchertest.NewSource(watcher.Target{ID: "a", URL: a.URL()}, watcher.Target{ID: "a2", URL: a.URL() + "/", Path: "x"})
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(src, sink))
	_, changed := w.Remotes()
	assert.False(t, w.Stats().Synced, "not before the source has spoken")
	start(t, w)
	<-changed
	urls, changed := w.Remotes()
	assert.Equal(t, []string{a.URL()}, urls, "two targets, one remote")
	assert.Equal(t, watcher.Stats{Targets: 2, Remotes: 1, Synced: true}, w.Stats())

	src.Set(watcher.Target{ID: "a", URL: a.URL()}, watcher.Target{ID: "b", URL: b.URL()})
	<-changed
	urls, _ = w.Remotes()
	assert.Equal(t, []string{a.URL(), b.URL()}, urls)
}

// reportingSink says how many times it was called, and fails the first time.
type reportingSink struct{ calls atomic.Int32 }

func (s *reportingSink) Deliver(context.Context, watcher.Change) error {
	return errors.New("Deliver must not be called on a Reporter")
}

func (s *reportingSink) DeliverReport(_ context.Context, c watcher.Change) (any, error) {
	n := s.calls.Add(1)
	if n == 1 {
		return fmt.Sprintf("partial %d", n), errors.New("first attempt fails")
	}
	return fmt.Sprintf("done %d at %s", n, c.To), nil
}

func TestReporterResultsReachObservers(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "init", gittest.File("a.yaml", "a"))

	obs := watchertest.NewObserver()
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL()}), watcher.Named("reporting", &reportingSink{})))
	start(t, w)
	ok := obs.WaitFor(t, "the delivery", watchertest.Is(watcher.EventDelivered, "t"))
	assert.Equal(t, "done 2 at "+c1, ok.Result)
	failed := obs.WaitFor(t, "the failure", watchertest.Is(watcher.EventDeliveryFailed, "t"))
	assert.Equal(t, "partial 1", failed.Result, "a failed delivery reports what it did")
}

// runningSink is a Runnable sink: it says when its Run starts and ends.
type runningSink struct {
	*watchertest.Sink
	runs, ended atomic.Int32
	started     chan struct{}
}

func (s *runningSink) Run(ctx context.Context) error {
	if s.runs.Add(1) == 1 {
		close(s.started)
	}
	<-ctx.Done()
	s.ended.Add(1)
	return nil
}

func TestRunnableSinksRunWithTheWatcher(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "init", gittest.File("a", "a"))
	sink := &runningSink{Sink: watchertest.NewSink("running"), started: make(chan struct{})}
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs)
	// Routed twice, run once.
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "a", URL: repo.URL()}), sink))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "b", URL: repo.URL()}), sink))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-sink.started
	sink.WaitDelivered(t, 2)
	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, int32(1), sink.runs.Load())
	assert.Equal(t, int32(1), sink.ended.Load(), "Run has returned when the watcher's Run returns")

	failing := watcher.New(watcher.WithCacheDir(t.TempDir()))
	require.NoError(t, failing.Route(watchertest.NewSource(), watcher.Named("x", struct {
		watcher.Sink
		watcher.Runnable
	}{watcher.SinkFunc(func(context.Context, watcher.Change) error { return nil }), runnableFunc(func(context.Context) error { return errors.New("boom") })})))
	assert.ErrorContains(t, failing.Run(context.Background()), "boom", "a Runnable's error stops the watcher")
}

type runnableFunc func(ctx context.Context) error

func (f runnableFunc) Run(ctx context.Context) error { return f(ctx) }

// The targets of one remote delivered at one commit record it in their
// checkpoints, each as a gitutil.Hash held in the checkpoint itself: at
// 100,000 targets no string of it is an object a collection marks.
func TestTargetsAtOneCommitRecordItInTheirCheckpoints(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("a/f", "1"), gittest.File("b/f", "1"), gittest.File("c/f", "1"))

	obs := watchertest.NewObserver()
	store := watcher.NewMemoryStore()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithStore(store))
	ids := []string{"a", "b", "c"}
	var targets []watcher.Target
	for _, id := range ids {
		targets = append(targets, watcher.Target{ID: id, URL: repo.URL(), Path: id})
	}
	require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
	start(t, w)
	shared := func(commit string) {
		t.Helper()
		for _, id := range ids {
			sink.WaitCommit(t, id, hash(commit))
			obs.WaitFor(t, "the delivery event of "+id, func(e watcher.Event) bool {
				return e.Type == watcher.EventDelivered && e.Target.ID == id && e.Commit == hash(commit)
			})
			cp, ok, err := store.Get(context.Background(), id+"/rec")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, hash(commit), cp.Commit)
		}
	}
	shared(c1)
	c2 := repo.Commit(t, "2", gittest.File("a/f", "2"), gittest.File("b/f", "2"), gittest.File("c/f", "2"))
	pollNow(t, w, obs, repo.URL())
	shared(c2)
}

// everyCommit is a test sink that takes every commit (watcher.EveryCommit).
type everyCommit struct{ *watchertest.Sink }

func (everyCommit) EveryCommit() bool { return true }

// A sink that takes every commit is handed a commit outside its target's
// Path (its tree unchanged: what it has), as a new commit from the one it
// has; the same route's other sink records it without a delivery; and a
// wrapper (watcher.Named) keeps the capability.
func TestASinkOfEveryCommitIsHandedACommitOutsideItsPath(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "init", gittest.File("deploy/app.yaml", "a"), gittest.File("docs/README", "x"))
	obs := watchertest.NewObserver()
	every, other := everyCommit{watchertest.NewSink("every")}, watchertest.NewSink("other")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL(), Path: "deploy"}), watcher.Named("every", every), other))
	start(t, w)
	every.WaitCommit(t, "t", hash(c1))
	other.WaitCommit(t, "t", hash(c1))

	c2 := repo.Commit(t, "docs only", gittest.File("docs/README", "y"))
	pollNow(t, w, obs, repo.URL())
	got := every.WaitCommit(t, "t", hash(c2))
	assert.Equal(t, watcher.ReasonNewCommit, got.Reason)
	assert.Equal(t, hash(c1), got.From)
	assert.Empty(t, got.Paths, "nothing of its path changed")
	data, err := readFile(got, "app.yaml")
	require.NoError(t, err)
	assert.Equal(t, "a", data)
	obs.WaitFor(t, "the other sink up to date at c2", func(e watcher.Event) bool {
		return e.Type == watcher.EventUpToDate && e.Commit == hash(c2) && e.Sink == "other"
	})
	assert.Len(t, other.Delivered(), 1, "recorded, not delivered")
}
