package watcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A checkpoint file cut in half (a torn write, a bad disk) does not wedge
// its target: it is reported, treated as absent, the target delivered again
// as Initial and the file rewritten.
func TestTornCheckpointIsDeliveredAgain(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	storeDir, cacheDir := t.TempDir(), t.TempDir()
	target := watcher.Target{ID: "t", URL: repo.URL()}

	run := func(t *testing.T, sink *watchertest.Sink, log *logLines) (stop func()) {
		store, err := watcher.NewFileStore(storeDir)
		require.NoError(t, err)
		w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithStore(store), watcher.WithInterval(time.Hour))
		require.NoError(t, w.Route(watchertest.NewSource(target), sink))
		if log != nil {
			return startLogging(t, w, log.logger())
		}
		return watchertest.Run(t, w.Run)
	}
	sink1 := watchertest.NewSink("rec")
	stop := run(t, sink1, nil)
	sink1.WaitCommit(t, "t", hash(c1))
	stop()

	files, err := filepath.Glob(filepath.Join(storeDir, "*.json"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	data, err := os.ReadFile(files[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(files[0], data[:len(data)/2], 0o644))

	sink2, log := watchertest.NewSink("rec"), &logLines{}
	stop = run(t, sink2, log)
	got := sink2.WaitCommit(t, "t", hash(c1))
	stop()
	assert.Equal(t, watcher.ReasonInitial, got.Reason)
	assert.Equal(t, 1, log.count("checkpoint unreadable"), "reported once")
	rewritten, err := os.ReadFile(files[0])
	require.NoError(t, err)
	var rec struct {
		Checkpoint watcher.Checkpoint `json:"checkpoint"`
	}
	require.NoError(t, json.Unmarshal(rewritten, &rec), "the record is whole again: %q", rewritten)
	assert.Equal(t, hash(c1), rec.Checkpoint.Commit)
}

// A mirror whose pack or index was cut short between runs is rebuilt on the
// next poll, and the commit pushed meanwhile is delivered. The git CLI and
// go-git lay packs out differently, so both first fetches are tried.
func TestTruncatedPackOrIndexIsRebuilt(t *testing.T) {
	// One history for every case, each case a fork of it (no git runs).
	srv := gittest.NewServer(t)
	base := srv.NewRepo(t, "g/base")
	for i := range 20 {
		base.Commit(t, fmt.Sprint(i), gittest.File(fmt.Sprintf("d%d/f", i%4), fmt.Sprint(i)), gittest.File("big", strings.Repeat(fmt.Sprint(i), 5000)))
	}
	c1 := base.Commit(t, "last", gittest.File("a/f", "1"))
	for i, tc := range []struct {
		name, cli, ext string
		live           bool // cut while the watcher runs
	}{
		{"pack by go-git", "", ".pack", false},
		{"idx by go-git", "", ".idx", false},
		{"pack by the git CLI", "git", ".pack", false},
		{"idx by the git CLI", "git", ".idx", false},
		{"pack by go-git, live", "", ".pack", true},
		{"pack by the git CLI, live", "git", ".pack", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := base.Fork(t, fmt.Sprintf("g/r%d", i))
			cacheDir := t.TempDir()
			store := watcher.NewMemoryStore()
			target := watcher.Target{ID: "t", URL: repo.URL()}
			readAll := func(_ context.Context, c watcher.Change) error {
				return fs.WalkDir(c.FS, ".", func(p string, d fs.DirEntry, err error) error {
					if err != nil || d.IsDir() {
						return err
					}
					_, err = fs.ReadFile(c.FS, p)
					return err
				})
			}
			var w *watcher.Watcher
			run := func(sink *watchertest.Sink, obs *watchertest.Observer) (stop func()) {
				w = watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithStore(store), watcher.WithInterval(time.Hour),
					watcher.WithGit(watcher.GoGit{GitCLI: tc.cli}), watcher.WithObserver(obs), watcher.WithRetryBackoff(watcher.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}))
				sink.SetHook(readAll)
				require.NoError(t, w.Route(watchertest.NewSource(target), sink))
				return watchertest.Run(t, w.Run)
			}
			sink, obs := watchertest.NewSink("rec"), watchertest.NewObserver()
			stop := run(sink, obs)
			sink.WaitCommit(t, "t", hash(c1))
			if !tc.live {
				stop()
			}

			mirrors := mirrorDirs(t, cacheDir)
			require.Len(t, mirrors, 1)
			files, err := filepath.Glob(filepath.Join(mirrors[0], "objects", "pack", "*"+tc.ext))
			require.NoError(t, err)
			require.NotEmpty(t, files)
			for _, f := range files {
				st, err := os.Stat(f)
				require.NoError(t, err)
				require.NoError(t, os.Truncate(f, st.Size()/2))
			}
			c2 := repo.Commit(t, "after", gittest.File("a/f", "2"))

			if tc.live {
				w.Trigger(repo.URL())
			} else {
				obs, sink = watchertest.NewObserver(), watchertest.NewSink("rec")
				stop = run(sink, obs)
			}
			defer stop()
			got := sink.WaitCommit(t, "t", hash(c2))
			assert.Equal(t, hash(c1), got.From)
			obs.WaitFor(t, "the rebuild", watchertest.Is(watcher.EventMirrorRebuilt, ""))
		})
	}
}

// Remotes whose fetches hang cannot hold every fetch slot: a fetch without
// progress gives its slot up after the yield time, so a healthy remote's
// commit is delivered while they still hang; after the abort time they are
// cancelled and reported as stalled.
func TestStalledFetchesDoNotBlockOthers(t *testing.T) {
	srv := gittest.NewServer(t)
	const stalled = 4
	var targets []watcher.Target
	var repos []*gittest.Repo
	for i := range stalled {
		repo := srv.NewRepo(t, fmt.Sprintf("g/stalled%d", i))
		repos = append(repos, repo)
		repo.Commit(t, "1", gittest.File("f", "1"))
		srv.Stall(repo.Name(), 0)
		targets = append(targets, watcher.Target{ID: fmt.Sprint("stalled", i), URL: repo.URL()})
	}
	healthy := srv.NewRepo(t, "g/healthy")
	c1 := healthy.Commit(t, "1", gittest.File("f", "1"))

	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	src := watchertest.NewSource(targets...)
	w := newWatcher(t, obs, watcher.WithConcurrency(watcher.Concurrency{Fetches: stalled}), watcher.WithTimeouts(watcher.Timeouts{StallYield: 500 * time.Millisecond, StallAbort: time.Hour}))
	require.NoError(t, w.Route(src, sink))
	start(t, w)
	for _, repo := range repos {
		require.Eventually(t, func() bool { return repo.Counts().Fetches.Load() > 0 }, 30*time.Second, 10*time.Millisecond, "%s fetching", repo.Name())
	}
	src.Set(append(targets, watcher.Target{ID: "healthy", URL: healthy.URL()})...)
	sink.WaitCommit(t, "healthy", hash(c1))
	assert.Equal(t, 1, obs.Count(watchertest.Is(watcher.EventFetched, "")), "only the healthy fetch ended: the stalled ones still hang")
}

// A poll that must wait for a fetch slot holds no worker of the poll pool:
// with one fetch slot, taken by a hanging fetch, and two remotes waiting
// for it, a third remote is still listed and polled (before, the waiting
// polls held both workers, and it was polled only when the fetch ended).
// When the hanging fetch ends, the slot goes to the waiting remotes in
// turn, and their targets are delivered.
func TestPollsWaitingForAFetchSlotLetOthersList(t *testing.T) {
	srv := gittest.NewServer(t)
	warm := srv.NewRepo(t, "g/warm")
	cw := warm.Commit(t, "1", gittest.File("f", "1"))
	targets := []watcher.Target{{ID: "warm", URL: warm.URL()}}
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	src := watchertest.NewSource(targets...)
	w := newWatcher(t, obs,
		watcher.WithConcurrency(watcher.Concurrency{Lists: 1, Fetches: 1}),
		watcher.WithTimeouts(watcher.Timeouts{StallYield: time.Hour, StallAbort: time.Hour}))
	require.NoError(t, w.Route(src, sink))
	start(t, w)
	sink.WaitCommit(t, "warm", hash(cw))

	var cold []*gittest.Repo
	commits := map[string]string{}
	for i := range 3 {
		repo := srv.NewRepo(t, fmt.Sprintf("g/cold%d", i))
		commits[repo.Name()] = repo.Commit(t, "1", gittest.File("f", "1"))
		srv.Stall(repo.Name(), 0)
		cold = append(cold, repo)
		targets = append(targets, watcher.Target{ID: repo.Name(), URL: repo.URL()})
	}
	src.Set(targets...)
	// One fetch hangs in the slot; the other two remotes listed, and wait.
	require.Eventually(t, func() bool {
		fetching, listed := 0, 0
		for _, repo := range cold {
			fetching += int(repo.Counts().Fetches.Load())
			if obs.Count(func(e watcher.Event) bool { return e.Type == watcher.EventListed && e.Remote == repo.URL() }) > 0 {
				listed++
			}
		}
		return fetching == 1 && listed == 3
	}, 30*time.Second, 10*time.Millisecond, "one cold remote fetching, all three listed")

	for range 3 {
		pollNow(t, w, obs, warm.URL())
	}
	for _, repo := range cold {
		assert.Zero(t, obs.Count(func(e watcher.Event) bool { return e.Type == watcher.EventPolled && e.Remote == repo.URL() }), "%s polled while the fetch hangs", repo.Name())
	}

	// When the hang ends, the fetch in the slot completes (the mirror
	// fetches again what was cut), and the slot goes to the two waiting
	// remotes in turn, with no poll asked for.
	for _, repo := range cold {
		srv.Stall(repo.Name(), -1)
	}
	for _, repo := range cold {
		sink.WaitCommit(t, repo.Name(), hash(commits[repo.Name()]))
	}
}

// A fetch with no progress for the abort time is cancelled and reported.
func TestStalledFetchIsAborted(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("f", "1"))
	srv.Stall(repo.Name(), 0)
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs, watcher.WithTimeouts(watcher.Timeouts{StallYield: 100 * time.Millisecond, StallAbort: 500 * time.Millisecond}))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL()}), watchertest.NewSink("rec")))
	start(t, w)
	e := obs.WaitFor(t, "the aborted fetch", func(e watcher.Event) bool { return e.Type == watcher.EventFetched && e.Err != nil })
	require.ErrorIs(t, e.Err, watcher.ErrFetchStalled)
	srv.Stall(repo.Name(), -1)
}

// A sink may keep Change.FS after Deliver returns: it reads the tree it
// was handed through later fetches and the repacks they cause, though the
// watcher closed it when Deliver returned.
func TestKeptFSReadsAfterRepacks(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("app/f", "v1"))
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithGit(watcher.GoGit{GitCLI: "git", RepackPacks: 2}))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL(), Path: "app"}), sink))
	start(t, w)
	kept := sink.WaitCommit(t, "t", hash(c1)).FS

	for i := 2; i <= 6; i++ {
		c := repo.Commit(t, fmt.Sprint(i), gittest.File("app/f", fmt.Sprint("v", i)))
		pollNow(t, w, obs, repo.URL())
		sink.WaitCommit(t, "t", hash(c))
	}
	data, err := fs.ReadFile(kept, "f")
	require.NoError(t, err, "the kept file system reads after the repacks")
	assert.Equal(t, "v1", string(data))
}
