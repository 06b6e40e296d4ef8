package hook_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/sink/hook"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// Publish, then hook, in one chain: the hook runs in the new tree, and
// through the link it sees the new tree too, never the old, however long
// the tree takes to write.
func TestChainedHookSeesTheNewTree(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	root, log := t.TempDir(), filepath.Join(t.TempDir(), "log")
	commit := func(i int) string {
		files := []gittest.Change{gittest.File("version", fmt.Sprint(i))}
		for j := range 2000 {
			files = append(files, gittest.File(fmt.Sprintf("d%d/f%04d", j%10, j), fmt.Sprint(i, j)))
		}
		return repo.Commit(t, fmt.Sprint(i), files...)
	}
	script := `echo "$MODWATCH_COMMIT $(cat version) $(cat "$ROOT/app/version")" >> "$LOG"`
	t.Setenv("ROOT", root)
	t.Setenv("LOG", log)
	chain := watcher.Chain("publish", dir.New(root), hook.Command("sh", []string{"-c", script}))

	obs := watchertest.NewObserver()
	w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithInterval(time.Hour), watcher.WithObserver(obs))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "app", URL: repo.URL()}), chain))
	watchertest.Run(t, w.Run)
	var commits []string
	for i := range 3 {
		c := commit(i)
		commits = append(commits, c)
		w.Trigger(repo.URL())
		e := obs.WaitFor(t, "the chain's delivery", func(e watcher.Event) bool {
			return e.Type == watcher.EventDelivered && e.Commit.String() == c
		})
		reports := e.Result.([]any)
		require.Len(t, reports, 2)
		assert.Equal(t, filepath.Join(root, "app"), reports[0].(dir.Published).Link)
	}
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 3)
	for i, line := range lines {
		assert.Equal(t, fmt.Sprintf("%s %d %d", commits[i], i, i), line, "the hook read the tree of its own commit")
	}
}
