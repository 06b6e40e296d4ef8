package watcher_test

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/gittest"
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
// before to count as kept, when still referenced (see gitutil.Detach).
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
		return e.Type == watcher.EventDelivered && e.Commit == c
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
		read[c.To] = string(data)
		return err
	}))
	w := newWatcher(t, obs, watcher.WithCacheDir(cache), watcher.WithGit(watcher.GoGit{RepackPacks: 2}))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL(), Path: "app"}), sink))
	start(t, w)
	obs.WaitFor(t, "the first delivery", func(e watcher.Event) bool { return e.Type == watcher.EventDelivered && e.Commit == c1 })
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
// fail with gitutil.ErrReleased rather than keep every replaced pack on
// disk. The tree of the delivery under way reads, and the newest kept
// still do.
func TestSinkKeepingTreesIsCountedAndBounded(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("app/f", "1"))
	cache := t.TempDir()
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithCacheDir(cache), watcher.WithGit(watcher.GoGit{RepackPacks: 2}), watcher.WithKeptTrees(2))
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
		if c.To == c1 {
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
	sink.WaitCommit(t, "t", c1)
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
	require.ErrorIs(t, err, gitutil.ErrReleased, "the oldest kept is released")
	_, err = fs.ReadFile(kept[0].Root, "app/f")
	require.ErrorIs(t, err, gitutil.ErrReleased, "its Root too, opened during Deliver")
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
