package watchertest

import (
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/modwatch/modwatch/watcher"
)

// NewWatcher returns a watcher for a test: its mirrors in a directory
// removed when the test ends, its log (to V(1)) in the test's log, then
// opts. Start it with [Run].
func NewWatcher(t testing.TB, opts ...watcher.Option) *watcher.Watcher {
	t.Helper()
	var (
		mu   sync.Mutex
		done bool
	)
	// Registered first, so it runs last: after Run's stop, a goroutine
	// the watcher abandoned may still log; the test's log is closed then.
	t.Cleanup(func() {
		mu.Lock()
		done = true
		mu.Unlock()
	})
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Log(prefix, args)
		}
	}, funcr.Options{Verbosity: 1})
	base := []watcher.Option{watcher.WithCacheDir(t.TempDir()), watcher.WithLogger(log)}
	return watcher.New(append(base, opts...)...)
}
