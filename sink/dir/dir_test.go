package dir_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/gittest"
	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, gittest.LeakOptions...)
}

func change(id, commit string, files fstest.MapFS) watcher.Change {
	return watcher.Change{Target: watcher.Target{ID: id}, To: commit, FS: files}
}

func TestPublishSwapsAtomically(t *testing.T) {
	root := t.TempDir()
	s := dir.New(root)
	tgt := watcher.Target{ID: "gitsync/ns/app"}
	link := s.Path(tgt)
	assert.Equal(t, filepath.Join(root, "gitsync_ns_app"), link)

	gen := func(i int) fstest.MapFS {
		v := []byte(fmt.Sprint(i))
		return fstest.MapFS{
			"a.yaml":      {Data: v},
			"sub/b.yaml":  {Data: v},
			"run.sh":      {Data: []byte("#!/bin/sh\n"), Mode: 0o755},
			"link.yaml":   {Data: []byte("sub/b.yaml"), Mode: os.ModeSymlink},
			"empty-dir/x": {Data: v},
		}
	}

	// A reader keeps reading both files through the link while commits are
	// published: it must never see two different generations.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mixed, reads atomic.Int64
	wg.Go(func() {
		for !stop.Load() {
			tree, err := os.Readlink(link)
			if err != nil {
				continue
			}
			a, err1 := os.ReadFile(filepath.Join(root, tree, "a.yaml"))
			b, err2 := os.ReadFile(filepath.Join(root, tree, "sub/b.yaml"))
			if err1 != nil || err2 != nil {
				continue // the old tree was removed after the swap
			}
			reads.Add(1)
			if string(a) != string(b) {
				mixed.Add(1)
			}
		}
	})
	for i := range 30 {
		c := change(tgt.ID, fmt.Sprintf("%040d", i), gen(i))
		c.Target = tgt
		require.NoError(t, s.Deliver(context.Background(), c))
	}
	stop.Store(true)
	wg.Wait()
	assert.Zero(t, mixed.Load(), "a reader saw a half-written tree (%d reads)", reads.Load())

	data, err := os.ReadFile(filepath.Join(link, "a.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "29", string(data))
	data, err = os.ReadFile(filepath.Join(link, "link.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "29", string(data), "symlinks inside the tree are kept")
	fi, err := os.Stat(filepath.Join(link, "run.sh"))
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&0o100, "executable bit kept")

	trees, err := os.ReadDir(filepath.Join(root, ".trees"))
	require.NoError(t, err)
	assert.Len(t, trees, 1, "old trees are removed")

	require.NoError(t, s.Remove(context.Background(), tgt))
	assert.NoFileExists(t, link)
	trees, err = os.ReadDir(filepath.Join(root, ".trees"))
	require.NoError(t, err)
	assert.Empty(t, trees)
	require.NoError(t, s.Remove(context.Background(), tgt), "removing twice is fine")
}

func TestBadLinkNameIsPermanent(t *testing.T) {
	s := dir.New(t.TempDir(), dir.WithLinkName(func(watcher.Target) string { return "../escape" }))
	err := s.Deliver(context.Background(), change("x", "c", fstest.MapFS{}))
	require.Error(t, err)
	assert.True(t, watcher.IsPermanent(err))
}

func TestWithWatcherAndGitServer(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("deploy/app.yaml", "v1"), gittest.Symlink("deploy/evil", "../../etc/passwd"))
	root := t.TempDir()
	s := dir.New(root)
	obs := watchertest.NewObserver()
	w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithInterval(time.Hour), watcher.WithObserver(obs),
		watcher.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))
	tgt := watcher.Target{ID: "app", URL: repo.URL(), Path: "deploy"}
	require.NoError(t, w.Route(watchertest.NewSource(tgt), s))
	watchertest.Run(t, w.Run)

	// The escaping symlink makes the delivery fail, reported, never written.
	e := obs.WaitFor(t, "delivery failure", watchertest.Is(watcher.EventDeliveryFailed, "app"))
	assert.ErrorContains(t, e.Err, "outside")
	assert.True(t, watcher.IsPermanent(e.Err), "a bad commit is not retried")
	c2 := repo.Commit(t, "2", gittest.Delete("deploy/evil"), gittest.File("deploy/app.yaml", "v2"))
	w.Trigger(repo.URL())
	obs.WaitFor(t, "delivered", func(e watcher.Event) bool { return e.Type == watcher.EventDelivered && e.Commit == c2 })
	data, err := os.ReadFile(filepath.Join(s.Path(tgt), "app.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "v2", string(data))
}

// A file system that is not the watcher's (a user's own, a test's) gets the
// same rule: a link is judged by where the operating system lands in the
// published tree, so a chain through "d -> ." cannot reach the host.
func TestPublishRefusesLinksThatLandOutside(t *testing.T) {
	climb := "d/d/d/d/d/d/d/d/../../../../../../../../../../../../etc/passwd"
	for name, files := range map[string]fstest.MapFS{
		"chain":    {"d": {Data: []byte("."), Mode: os.ModeSymlink}, "evil": {Data: []byte(climb), Mode: os.ModeSymlink}},
		"via dir":  {"sub/x": {Data: []byte("x")}, "s": {Data: []byte("sub"), Mode: os.ModeSymlink}, "evil": {Data: []byte("s/../../x"), Mode: os.ModeSymlink}},
		"absolute": {"evil": {Data: []byte("/etc/passwd"), Mode: os.ModeSymlink}},
		"dangling": {"evil": {Data: []byte("missing/../../../x"), Mode: os.ModeSymlink}},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			s := dir.New(root)
			files["app.yaml"] = &fstest.MapFile{Data: []byte("app")}
			err := s.Deliver(context.Background(), change("app", "c1", files))
			require.ErrorIs(t, err, gitutil.ErrSymlinkEscape)
			assert.True(t, watcher.IsPermanent(err))
			assert.NoFileExists(t, filepath.Join(root, "app"), "nothing published")
			trees, err := os.ReadDir(filepath.Join(root, ".trees"))
			require.NoError(t, err)
			assert.Empty(t, trees, "the refused tree is removed")
		})
	}
	// Links that stay inside, chained or dangling inside, are published.
	root := t.TempDir()
	s := dir.New(root)
	require.NoError(t, s.Deliver(context.Background(), change("app", "c1", fstest.MapFS{
		"app.yaml": {Data: []byte("app")},
		"d":        {Data: []byte("."), Mode: os.ModeSymlink},
		"fine":     {Data: []byte("d/d/app.yaml"), Mode: os.ModeSymlink},
		"later":    {Data: []byte("missing.yaml"), Mode: os.ModeSymlink},
	})))
	data, err := os.ReadFile(filepath.Join(root, "app", "fine"))
	require.NoError(t, err)
	assert.Equal(t, "app", string(data))
}
