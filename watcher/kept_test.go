package watcher_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/metrics"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// packsOnDisk counts the packs of the mirrors in a cache directory.
func packsOnDisk(t *testing.T, cacheDir string) int {
	t.Helper()
	n := 0
	for _, dir := range mirrorDirs(t, cacheDir) {
		packs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.pack"))
		require.NoError(t, err)
		n += len(packs)
	}
	return n
}

// collect runs garbage collections enough for the trees handed to sinks
// before to count as kept, when still referenced (see mirror.Detach).
func collect() {
	runtime.GC()
	runtime.GC()
}

// commitAndDeliver commits v to app/f, polls, and waits for the delivery
// of the commit to sink (named "rec").
func commitAndDeliver(t *testing.T, w *watcher.Watcher, obs *watchertest.Observer, repo *gittest.Repo, v string) string {
	t.Helper()
	c := repo.Commit(t, v, gittest.File("app/f", v))
	pollNow(t, w, obs, repo.URL())
	obs.WaitFor(t, "the delivery of "+v, func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Commit == hash(c)
	})
	return c
}

// An observer keeps every event (as watchertest's does, and a status
// page's history would): the events carry what the sink was handed but
// its trees, so the packs that repacks replace go, however many events it
// keeps. They used to carry Change.FS and Root, which kept every replaced
// pack on disk (13 packs, 6.5 MiB, for a repository of 0.54 MiB).
func TestObserverKeepingEventsKeepsNoPack(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("app/f", "1"))
	cache := t.TempDir()
	obs := watchertest.NewObserver()
	read := map[string]string{} // what the sink read during each Deliver
	sink := watcher.Named("rec", watcher.SinkFunc(func(_ context.Context, c watcher.Change) error {
		data, err := fs.ReadFile(c.FS, "f")
		read[c.To.String()] = string(data)
		return err
	}))
	w := newWatcherIn(t, obs, cache, watcher.WithGit(watcher.GoGit{RepackPacks: 2}))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL(), Path: "app"}), sink))
	start(t, w)
	obs.WaitFor(t, "the first delivery", func(e watcher.Event) bool { return e.Type == watcher.EventDelivered && e.Commit == hash(c1) })
	for i := 2; i <= 15; i++ {
		commitAndDeliver(t, w, obs, repo, fmt.Sprint(i))
	}
	collect()
	last := commitAndDeliver(t, w, obs, repo, "16")

	assert.LessOrEqual(t, packsOnDisk(t, cache), 3, "the mirror's own packs, at most the repack threshold and the pack of the last fetch")
	delivered := 0
	for _, e := range obs.Events() {
		if e.Type != watcher.EventDelivered {
			continue
		}
		delivered++
		require.NotNil(t, e.Change, "an event says what was delivered")
		assert.Nil(t, e.Change.FS, "an event carries no tree")
		assert.Nil(t, e.Change.Root)
		assert.Equal(t, e.Commit, e.Change.To)
	}
	assert.Equal(t, 16, delivered)
	assert.Equal(t, "16", read[last], "the sink read its tree during Deliver")
}

// A sink that keeps every Change (watchertest's does) keeps trees past
// Deliver, legitimately: they are counted (Stats, the metrics' gauges),
// and past WithKeptTrees the oldest are released, so that their reads
// fail with mirror.ErrReleased rather than keep every replaced pack on
// disk. The tree of the delivery under way reads, and the newest kept
// still do.
func TestSinkKeepingTreesIsCountedAndBounded(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("app/f", "1"))
	cache := t.TempDir()
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcherIn(t, obs, cache, watcher.WithGit(watcher.GoGit{RepackPacks: 2}), watcher.WithKeptTrees(2))
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.CollectStats(w))
	type during struct {
		stats     watcher.Stats
		gauge     float64
		data      string
		err, gerr error
	}
	var last during // of the delivery under way, read after its event
	sink.SetHook(func(_ context.Context, c watcher.Change) error {
		if c.To == hash(c1) {
			_, err := fs.ReadFile(c.Root, "app/f") // opened during Deliver, kept with FS
			return err
		}
		last = during{stats: w.Stats()}
		last.gauge, last.gerr = gauge(reg, "modwatch_kept_trees")
		last.data, last.err = readFile(c, "f")
		return nil
	})
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL(), Path: "app"}), sink))
	start(t, w)
	sink.WaitCommit(t, "t", hash(c1))
	for i := 2; i <= 16; i++ {
		commitAndDeliver(t, w, obs, repo, fmt.Sprint(i))
	}
	// Delivery 16 began once 15's was over: every tree but 16's was handed
	// on before these collections.
	collect()
	commitAndDeliver(t, w, obs, repo, "17")

	assert.LessOrEqual(t, packsOnDisk(t, cache), 9, "the mirror's packs and those of the two generations kept, not sixteen")
	require.NoError(t, last.err, "the tree of the delivery under way reads")
	assert.Equal(t, "17", last.data)
	assert.Equal(t, 2, last.stats.KeptTrees, "kept, not released: the bound")
	require.NoError(t, last.gerr)
	assert.Equal(t, 2.0, last.gauge, "the gauge says it")
	assert.Positive(t, last.stats.KeptPackBytes, "the newest kept read packs a repack since replaced")

	kept := sink.Delivered()
	require.Len(t, kept, 17)
	_, err = fs.ReadFile(kept[0].FS, "f")
	require.ErrorIs(t, err, mirror.ErrReleased, "the oldest kept is released")
	_, err = fs.ReadFile(kept[0].Root, "app/f")
	require.ErrorIs(t, err, mirror.ErrReleased, "its Root too, opened during Deliver")
	data, err := readFile(kept[15], "f")
	require.NoError(t, err, "the newest kept read")
	assert.Equal(t, "16", string(data))
}

// gauge reads a gauge of reg.
func gauge(reg *prometheus.Registry, name string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("no gauge %s", name)
}

// The tree of a delivery under way is the watcher's, not kept: however
// many trees other deliveries of its mirror left kept past the bound, and
// released, a sink slow to read its own reads it.
func TestTreeOfADeliveryUnderWayIsNeverReleased(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("a/f", "a1"), gittest.File("b/f", "b1"))
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithGit(watcher.GoGit{RepackPacks: 2}), watcher.WithKeptTrees(1))
	inA, goOn := make(chan struct{}), make(chan struct{})
	var after string
	var afterErr error
	sink.SetHook(func(ctx context.Context, c watcher.Change) error {
		if c.Target.ID != "a" {
			return nil
		}
		close(inA) // a's path never changes again: delivered once
		select {
		case <-goOn:
		case <-ctx.Done():
			return ctx.Err()
		}
		after, afterErr = readFile(c, "f")
		return nil
	})
	src := watchertest.NewSource(watcher.Target{ID: "a", URL: repo.URL(), Path: "a"}, watcher.Target{ID: "b", URL: repo.URL(), Path: "b"})
	require.NoError(t, w.Route(src, sink))
	start(t, w)
	<-inA
	first := sink.WaitCommit(t, "b", hash(c1))
	for i := 2; i <= 6; i++ {
		if i == 6 {
			collect() // what b's sink kept until now counts as kept
		}
		c := repo.Commit(t, fmt.Sprint(i), gittest.File("b/f", fmt.Sprint("b", i)))
		pollNow(t, w, obs, repo.URL())
		sink.WaitCommit(t, "b", hash(c))
	}
	_, err := readFile(first, "f")
	require.ErrorIs(t, err, mirror.ErrReleased, "b's oldest kept tree is released")

	close(goOn)
	sink.WaitCommit(t, "a", hash(c1))
	require.NoError(t, afterErr, "a's tree, its delivery under way, is not")
	assert.Equal(t, "a1", after)
}

// heldTree is a report, and treeError an error, that keep the tree their
// delivery was handed: an observer that keeps events keeps them.
type heldTree struct{ fsys fs.FS }

type treeError struct{ fsys fs.FS }

func (treeError) Error() string { return "failed, with the tree" }

// treeKeeper is a Reporter that keeps each tree in what it returns: a
// report on odd deliveries, an error on even ones.
type treeKeeper struct{ n int }

func (k *treeKeeper) Deliver(ctx context.Context, c watcher.Change) error {
	_, err := k.DeliverReport(ctx, c)
	return err
}

func (k *treeKeeper) DeliverReport(_ context.Context, c watcher.Change) (any, error) {
	k.n++
	if k.n%2 == 1 {
		return heldTree{c.FS}, nil
	}
	return nil, watcher.Permanent(treeError{c.FS})
}

// Other roads to the same disk: a tree kept in a Reporter's report
// (Event.Result) or in the error a sink returned (Event.Err), by an
// observer that keeps events. The watcher cannot take them out: they are
// kept trees, bounded as a sink's, the oldest released.
func TestTreesKeptInReportsAndErrorsAreBounded(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	cache := t.TempDir()
	obs := watchertest.NewObserver()
	w := newWatcherIn(t, obs, cache, watcher.WithGit(watcher.GoGit{RepackPacks: 2}), watcher.WithKeptTrees(2))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL(), Path: "app"}), &treeKeeper{}))
	outcome := func(c string) func(watcher.Event) bool {
		return func(e watcher.Event) bool {
			return (e.Type == watcher.EventDelivered || e.Type == watcher.EventDeliveryFailed) && e.Commit == hash(c)
		}
	}
	c1 := repo.Commit(t, "1", gittest.File("app/f", "1"))
	start(t, w)
	obs.WaitFor(t, "the first delivery", outcome(c1))
	for i := 2; i <= 12; i++ {
		if i == 12 {
			collect()
		}
		c := repo.Commit(t, fmt.Sprint(i), gittest.File("app/f", fmt.Sprint(i)))
		pollNow(t, w, obs, repo.URL())
		obs.WaitFor(t, "the delivery of "+fmt.Sprint(i), outcome(c))
	}

	assert.LessOrEqual(t, packsOnDisk(t, cache), 9, "the mirror's packs and those of the two generations kept, not eleven")
	var report, failure fs.FS
	for _, e := range obs.Events() {
		var te treeError
		switch {
		case report == nil && e.Type == watcher.EventDelivered:
			report = e.Result.(heldTree).fsys
		case failure == nil && e.Type == watcher.EventDeliveryFailed && errors.As(e.Err, &te):
			failure = te.fsys
		}
	}
	require.NotNil(t, report)
	require.NotNil(t, failure)
	_, err := fs.ReadFile(report, "f")
	require.ErrorIs(t, err, mirror.ErrReleased, "the tree of the oldest report is released")
	_, err = fs.ReadFile(failure, "f")
	require.ErrorIs(t, err, mirror.ErrReleased, "the tree of the oldest error is released")
}
