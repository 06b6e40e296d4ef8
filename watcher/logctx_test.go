package watcher_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// The logger comes with Run's context, and a sink's Deliver gets it with
// the target and the sink named; the source's Run gets it too.
func TestLoggerComesWithTheContext(t *testing.T) {
	git, repo := memoryRemote()
	c1 := repo.Commit(t, map[string]string{"f": "1"})
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{})
	sink := watchertest.NewSink("rec")
	sink.SetHook(func(ctx context.Context, c watcher.Change) error {
		logr.FromContextOrDiscard(ctx).Info("sink says")
		return nil
	})
	src := watcher.SourceFunc(func(ctx context.Context, update func([]watcher.Target)) error {
		logr.FromContextOrDiscard(ctx).Info("source says")
		update([]watcher.Target{{ID: "t", URL: repo.URL()}})
		<-ctx.Done()
		return nil
	})
	w := newWatcher(t, watchertest.NewObserver(), watcher.WithGit(git))
	require.NoError(t, w.Route(src, sink))
	startLogging(t, w, log)
	sink.WaitCommit(t, "t", c1)

	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(lines, "\n")
	assert.Contains(t, all, `"msg"="source says"`)
	assert.Regexp(t, `"msg"="sink says" "target"="t" "sink"="rec"`, all)
}
