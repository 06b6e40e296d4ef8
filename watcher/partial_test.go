package watcher_test

import (
	"context"
	"io/fs"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A watcher of paths of a monorepo on partial mirrors: each target's files
// are fetched once per commit for all targets, its file system reads them,
// a read outside the path (a kustomize base through Change.Root) is
// fetched when made, and the large files of other paths never come, on
// the first sync or after.
func TestPartialMirrorDeliversPathsOfAMonorepo(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/mono")
	big := strings.Repeat("z", 512<<10)
	c1 := repo.Commit(t, "init",
		gittest.File("apps/a/cm.yaml", "a1"), gittest.File("apps/b/cm.yaml", "b1"),
		gittest.File("base/shared.yaml", "shared"), gittest.File("data/big.bin", big))

	var mu sync.Mutex
	read := map[string]string{} // target@commit → what it read
	sink := watcher.Named("read", watcher.SinkFunc(func(_ context.Context, c watcher.Change) error {
		own, err := fs.ReadFile(c.FS, "cm.yaml")
		if err != nil {
			return err
		}
		base, err := fs.ReadFile(c.Root, "base/shared.yaml")
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		read[c.Target.ID+"@"+c.To.String()] = string(own) + "+" + string(base)
		return nil
	}))
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs, watcher.WithGit(watcher.GoGit{GitCLI: gitBin, Partial: true}))
	targets := []watcher.Target{
		{ID: "a", URL: repo.URL(), Path: "apps/a"},
		{ID: "b", URL: repo.URL(), Path: "apps/b"},
	}
	require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
	start(t, w)
	obs.WaitCount(t, "both delivered", 2, watchertest.Is(watcher.EventDelivered, ""))
	mu.Lock()
	assert.Equal(t, map[string]string{"a@" + c1: "a1+shared", "b@" + c1: "b1+shared"}, read)
	mu.Unlock()
	assert.Less(t, repo.Counts().FetchBytes.Load(), int64(len(big)/4), "the large file of another path never came")

	settle(t, w, obs, repo.URL())
	fetches, bytes := repo.Counts().Fetches.Load(), repo.Counts().FetchBytes.Load()
	c2 := repo.Commit(t, "bump a, and the data", gittest.File("apps/a/cm.yaml", "a2"), gittest.File("data/big.bin", big+"more"))
	pollNow(t, w, obs, repo.URL())
	obs.WaitCount(t, "a delivered again", 3, watchertest.Is(watcher.EventDelivered, ""))
	mu.Lock()
	assert.Equal(t, "a2+shared", read["a@"+c2])
	assert.NotContains(t, read, "b@"+c2, "b's tree did not change")
	mu.Unlock()
	assert.Equal(t, fetches+2, repo.Counts().Fetches.Load(), "commits and trees, then a's new file: %d", repo.Counts().Fetches.Load()-fetches)
	assert.Less(t, repo.Counts().FetchBytes.Load()-bytes, int64(len(big)/4), "the new large file did not come")
	for _, e := range obs.Events() {
		if e.Type == watcher.EventTargetFailed {
			t.Errorf("a target failed: %v", e.Err)
		}
	}
}
