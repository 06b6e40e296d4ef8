package dir_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, gittest.LeakOptions...)
}

func change(id, commit string, files fstest.MapFS) watcher.Change {
	return watcher.Change{Target: watcher.Target{ID: id}, To: named(commit), FS: files}
}

// named is commit's hash: itself when it is 40 hexadecimal digits, a
// hash of the name otherwise ("c1").
func named(commit string) gitutil.Hash {
	if h, err := gitutil.ParseHash(commit); err == nil {
		return h
	}
	return gitutil.Hash(sha1.Sum([]byte(commit)))
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
		watcher.WithRetryBackoff(watcher.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}))
	tgt := watcher.Target{ID: "app", URL: repo.URL(), Path: "deploy"}
	require.NoError(t, w.Route(watchertest.NewSource(tgt), s))
	watchertest.Run(t, w.Run)

	// The escaping symlink makes the delivery fail, reported, never written.
	e := obs.WaitFor(t, "delivery failure", watchertest.Is(watcher.EventDeliveryFailed, "app"))
	assert.ErrorContains(t, e.Err, "outside")
	assert.True(t, watcher.IsPermanent(e.Err), "a bad commit is not retried")
	c2 := repo.Commit(t, "2", gittest.Delete("deploy/evil"), gittest.File("deploy/app.yaml", "v2"))
	w.Trigger(repo.URL())
	obs.WaitFor(t, "delivered", func(e watcher.Event) bool { return e.Type == watcher.EventDelivered && e.Commit.String() == c2 })
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
			require.ErrorIs(t, err, mirror.ErrSymlinkEscape)
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

// treeNames lists root/.trees.
func treeNames(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, ".trees"))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// What a process killed mid-publish leaves (a tree half written, a link
// half swapped) is removed when the sink starts; a tree no link names is
// removed once its grace, counted from its modification time, is over.
// (Fake time in a synctest bubble.)
func TestCrashLeftoversAreRemovedAtStart(t *testing.T) {
	root := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		s := dir.New(root, dir.WithStaleGrace(10*time.Minute))
		ctx := context.Background()
		require.NoError(t, s.Deliver(ctx, change("app", "c1", fstest.MapFS{"f": {Data: []byte("1")}})))
		published := treeNames(t, root)
		require.Len(t, published, 1)

		trees := filepath.Join(root, ".trees")
		require.NoError(t, os.MkdirAll(filepath.Join(trees, ".tmp-app-c2-0000", "sub"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(trees, ".tmp-app-c2-0000", "sub", "half"), []byte("x"), 0o644))
		require.NoError(t, os.Symlink(".trees/app-c2-0000", filepath.Join(root, ".tmp-app-1234")))
		for name, age := range map[string]time.Duration{"app-old-1": time.Hour, "app-recent-2": time.Minute} {
			require.NoError(t, os.Mkdir(filepath.Join(trees, name), 0o755))
			at := time.Now().Add(-age)
			require.NoError(t, os.Chtimes(filepath.Join(trees, name), at, at))
		}

		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(runCtx) }()
		synctest.Wait()
		assert.ElementsMatch(t, append([]string{"app-recent-2"}, published...), treeNames(t, root),
			"half-written and long-retired trees are gone; the published one and one within its grace stay")
		assert.NoFileExists(t, filepath.Join(root, ".tmp-app-1234"))
		data, err := os.ReadFile(filepath.Join(s.Path(watcher.Target{ID: "app"}), "f"))
		require.NoError(t, err)
		assert.Equal(t, "1", string(data))

		time.Sleep(10 * time.Minute)
		synctest.Wait()
		assert.Equal(t, published, treeNames(t, root), "the recent one goes when its grace ends")
		cancel()
		require.NoError(t, <-done)
	})
}

// With a grace, the tree a link left stays readable for the grace, then
// goes; without one, it goes at once.
func TestStaleTreeGrace(t *testing.T) {
	for _, grace := range []time.Duration{0, time.Minute} {
		t.Run(grace.String(), func(t *testing.T) {
			root := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				s := dir.New(root, dir.WithStaleGrace(grace))
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- s.Run(ctx) }()
				require.NoError(t, s.Deliver(ctx, change("app", "c1", fstest.MapFS{"f": {Data: []byte("1")}})))
				first := treeNames(t, root)
				require.NoError(t, s.Deliver(ctx, change("app", "c2", fstest.MapFS{"f": {Data: []byte("2")}})))
				if grace == 0 {
					assert.Len(t, treeNames(t, root), 1)
				} else {
					time.Sleep(grace - time.Second)
					synctest.Wait()
					assert.Subset(t, treeNames(t, root), first, "still there within the grace")
					time.Sleep(2 * time.Second)
					synctest.Wait()
					assert.NotSubset(t, treeNames(t, root), first, "gone after it")
				}
				assert.Len(t, treeNames(t, root), 1)
				require.NoError(t, s.Remove(ctx, watcher.Target{ID: "app"}))
				time.Sleep(grace + time.Second)
				synctest.Wait()
				assert.Empty(t, treeNames(t, root))
				cancel()
				require.NoError(t, <-done)
			})
		})
	}
}

// The commit file holds the published commit; a tree that has a file of
// that name is refused for good.
func TestCommitFile(t *testing.T) {
	root := t.TempDir()
	s := dir.New(root, dir.WithCommitFile(".git-commit"))
	commit := strings.Repeat("c", 40)
	require.NoError(t, s.Deliver(context.Background(), change("app", commit, fstest.MapFS{"f": {Data: []byte("1")}})))
	data, err := os.ReadFile(filepath.Join(s.Path(watcher.Target{ID: "app"}), ".git-commit"))
	require.NoError(t, err)
	assert.Equal(t, commit+"\n", string(data))

	err = s.Deliver(context.Background(), change("app", "d", fstest.MapFS{".git-commit": {Data: []byte("forged")}}))
	require.Error(t, err)
	assert.True(t, watcher.IsPermanent(err), "%v", err)
	data, err = os.ReadFile(filepath.Join(s.Path(watcher.Target{ID: "app"}), ".git-commit"))
	require.NoError(t, err)
	assert.Equal(t, commit+"\n", string(data), "the published tree is untouched")
}

// panicky is a file system whose listing of directory b panics.
type panicky struct{ fstest.MapFS }

func (p panicky) ReadDir(name string) ([]fs.DirEntry, error) {
	if name == "b" {
		panic("read fault")
	}
	return p.MapFS.ReadDir(name)
}

// A delivery that panics mid-tree (the watcher's fault guard recovers
// it), while workers copy files, leaves no half-written tree: at once,
// not when the sink next starts.
func TestPanicLeavesNoHalfWrittenTree(t *testing.T) {
	root := t.TempDir()
	s := dir.New(root)
	files := fstest.MapFS{"b/x": {Data: []byte("x")}}
	for i := range 4 * 64 {
		files[fmt.Sprintf("a/%03d", i)] = &fstest.MapFile{Data: []byte("x")}
	}
	require.PanicsWithValue(t, "read fault", func() {
		_ = s.Deliver(context.Background(), watcher.Change{Target: watcher.Target{ID: "app"}, To: named("c1"), FS: panicky{files}})
	})
	assert.Empty(t, treeNames(t, root), "a half-written tree")
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, ".trees", entries[0].Name())

	require.NoError(t, s.Deliver(context.Background(), change("app", "c2", files)))
	data, err := os.ReadFile(filepath.Join(s.Path(watcher.Target{ID: "app"}), "a", "007"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(data))
}

// A link in place of the sink's own directory of trees (.trees) is not
// followed: nothing is written there, and what lies where it leads (an
// old tree's name, a temporary's) is not removed at start.
func TestTheTreesDirectoryIsNotALink(t *testing.T) {
	root, elsewhere := t.TempDir(), t.TempDir()
	for _, name := range []string{".tmp-app-c2-0000", "app-old-1"} {
		require.NoError(t, os.Mkdir(filepath.Join(elsewhere, name), 0o755))
		old := time.Now().Add(-time.Hour)
		require.NoError(t, os.Chtimes(filepath.Join(elsewhere, name), old, old))
	}
	require.NoError(t, os.Symlink(elsewhere, filepath.Join(root, ".trees")))
	s := dir.New(root)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Error(t, s.Run(ctx), "the start refuses the link")
	err := s.Deliver(context.Background(), change("app", "c1", fstest.MapFS{"f": {Data: []byte("1")}}))
	require.ErrorContains(t, err, "not a directory of the sink's")
	entries, err := os.ReadDir(elsewhere)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{".tmp-app-c2-0000", "app-old-1"}, names, "nothing removed or written through the link")
}
