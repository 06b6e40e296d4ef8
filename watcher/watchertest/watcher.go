package watchertest

import (
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/modwatch/modwatch/watcher"
)

// NewWatcher returns a watcher for a test: its mirrors in a directory
// removed when the test ends, then opts. Start it with [Run], which gives
// it the test's log.
func NewWatcher(t testing.TB, opts ...watcher.Option) *watcher.Watcher {
	t.Helper()
	base := []watcher.Option{watcher.WithCacheDir(t.TempDir())}
	return watcher.New(append(base, opts...)...)
}

// Logger is a logger into t's log (to V(1)), for the context of a Run. It
// says nothing once the test has ended: a goroutine a watcher abandoned
// may still log then, and the test's log is closed.
func Logger(t testing.TB) logr.Logger {
	var (
		mu   sync.Mutex
		done bool
	)
	t.Cleanup(func() {
		mu.Lock()
		done = true
		mu.Unlock()
	})
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Log(prefix, args)
		}
	}, funcr.Options{Verbosity: 1})
}
