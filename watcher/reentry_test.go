package watcher_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// The program's code that the watcher calls (a sink's Name and Unwrap, a
// Git's OpenMirror, a Mirror's Kept) may read the watcher: a logger that
// reports Stats, a wrapper that asks Remotes. None of it runs while the
// watcher holds a lock of its own, so none of it can deadlock it. A
// deadlock fails these tests within gittest.ReentryWait, and does not hang the
// package: runBounded leaves a Run that cannot stop behind.

// within fails t when ch is not closed within gittest.ReentryWait.
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(gittest.ReentryWait):
		t.Fatalf("no %s within %s: deadlocked", what, gittest.ReentryWait)
	}
}

// runBounded runs w until the test ends; a Run that does not return within
// 5s of its cancel fails the test and is left behind.
func runBounded(t *testing.T, w *watcher.Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), watchertest.Logger(t)))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5s of its cancel: deadlocked")
		}
	})
}

// onFirst returns a hook for a watchertest.Sink, and what it closes at the
// sink's first delivery.
func onFirst() (func(context.Context, watcher.Change) error, <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return func(context.Context, watcher.Change) error { once.Do(func() { close(ch) }); return nil }, ch
}

// watcherReadingSink wraps a sink; its Name and Unwrap read the watcher's Stats.
type watcherReadingSink struct {
	inner watcher.Sink
	w     atomic.Pointer[watcher.Watcher]
}

func (s *watcherReadingSink) read() {
	if w := s.w.Load(); w != nil {
		w.Stats()
	}
}

func (s *watcherReadingSink) Name() string         { s.read(); return "reading" }
func (s *watcherReadingSink) Unwrap() watcher.Sink { s.read(); return s.inner }
func (s *watcherReadingSink) Deliver(ctx context.Context, c watcher.Change) error {
	return s.inner.Deliver(ctx, c)
}

// listed is a watchertest.Sink that is an Inventory of nothing, and says
// when the sweep at start listed it.
type listed struct {
	*watchertest.Sink
	once sync.Once
	done chan struct{}
}

func (l *listed) Targets(context.Context) ([]string, error) {
	l.once.Do(func() { close(l.done) })
	return nil, nil
}

// A sink whose Name and Unwrap read the watcher (asked by Route, and by
// the sweep at start for an Inventory) does not deadlock it.
func TestASinkThatReadsTheWatcherDoesNotDeadlockIt(t *testing.T) {
	git, remote := memoryRemote()
	remote.Commit(t, map[string]string{"a.yaml": "a"})
	inv := &listed{Sink: watchertest.NewSink("inner"), done: make(chan struct{})}
	hook, delivered := onFirst()
	inv.SetHook(hook)
	sink := &watcherReadingSink{inner: inv}
	w := watchertest.NewWatcher(t, watcher.WithGit(git))
	sink.w.Store(w)
	var err error
	gittest.ReturnsWithin(t, "Route, the sink's Name reading Stats", func() {
		err = w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: remote.URL()}), sink)
	})
	require.NoError(t, err)
	runBounded(t, w)
	within(t, delivered, "delivery")
	within(t, inv.done, "sweep at start listing the inventory (Unwrap reading Stats)")
	gittest.ReturnsWithin(t, "Stats", func() { w.Stats() })
}

// keptGit opens mirrors whose Kept reads the watcher's Remotes.
type keptGit struct {
	watcher.Git
	w *atomic.Pointer[watcher.Watcher]
}

func (g keptGit) OpenMirror(dir, url string, opts mirror.Options) (watcher.Mirror, error) {
	m, err := g.Git.OpenMirror(dir, url, opts)
	return keptMirror{Mirror: m, w: g.w}, err
}

type keptMirror struct {
	watcher.Mirror
	w *atomic.Pointer[watcher.Watcher]
}

func (m keptMirror) Kept() mirror.KeptStats {
	m.w.Load().Remotes()
	return mirror.KeptStats{Trees: 1}
}

// A mirror of the program's (WithGit) is asked what it keeps by Stats; one
// that reads the watcher then does not deadlock it.
func TestAMirrorThatReadsTheWatcherWhenAskedWhatItKeepsDoesNotDeadlockIt(t *testing.T) {
	git, remote := memoryRemote()
	remote.Commit(t, map[string]string{"a.yaml": "a"})
	var wp atomic.Pointer[watcher.Watcher]
	w := watchertest.NewWatcher(t, watcher.WithGit(keptGit{Git: git, w: &wp}))
	wp.Store(w)
	sink := watchertest.NewSink("s")
	hook, delivered := onFirst()
	sink.SetHook(hook)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: remote.URL()}), sink))
	runBounded(t, w)
	within(t, delivered, "delivery")
	var st watcher.Stats
	gittest.ReturnsWithin(t, "Stats, the mirror's Kept reading Remotes", func() { st = w.Stats() })
	require.Equal(t, 1, st.KeptTrees, "the mirror was asked")
}

// loggingGit is a Git that logs each mirror it opens through a logger
// that reads the watcher's Stats, as the CI's did.
type loggingGit struct {
	watcher.Git
	w      *atomic.Pointer[watcher.Watcher]
	opened atomic.Int32
}

func (g *loggingGit) OpenMirror(dir, url string, opts mirror.Options) (watcher.Mirror, error) {
	g.w.Load().Stats()
	g.opened.Add(1)
	return g.Git.OpenMirror(dir, url, opts)
}

// The mirror of a submodule is opened by the program's Git too: one that
// reads the watcher meanwhile does not deadlock the delivery, nor Stats.
func TestAGitThatReadsTheWatcherWhileItOpensASubmodulesMirrorDoesNotDeadlockIt(t *testing.T) {
	srv := gittest.NewServer(t)
	lib := srv.NewRepo(t, "g/lib")
	pin := lib.Commit(t, "lib", gittest.File("lib.yaml", "lib"))
	app := srv.NewRepo(t, "g/app")
	app.Commit(t, "app", gittest.File("app.yaml", "app"), gittest.Submodule("lib", "../lib.git", pin))

	var wp atomic.Pointer[watcher.Watcher]
	git := &loggingGit{Git: watcher.DefaultGit(), w: &wp}
	w := watchertest.NewWatcher(t, watcher.WithGit(git))
	wp.Store(w)
	sink := watchertest.NewSink("s")
	hook, delivered := onFirst()
	sink.SetHook(hook)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: app.URL(), RecurseSubmodules: true}), sink))
	runBounded(t, w)
	within(t, delivered, "delivery with its submodule")
	require.EqualValues(t, 2, git.opened.Load(), "the remote's mirror and the submodule's")
	gittest.ReturnsWithin(t, "Stats", func() { w.Stats() })
}
