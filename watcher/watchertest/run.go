package watchertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// Run runs run (a Watcher's Run, a Source's, a program's) in a goroutine
// until the test ends, then cancels its context and fails the test if it
// returns an error or does not return within DefaultTimeout. The returned
// stop does that earlier (a restart in a test); it may be called again.
//
//	watchertest.Run(t, w.Run)
func Run(t testing.TB, run func(ctx context.Context) error) (stop func()) {
	t.Helper()
	// Registered before stop, so it runs after it: the log stays open
	// while Run stops.
	log := Logger(t)
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("watchertest: Run returned %v", err)
				}
			case <-time.After(DefaultTimeout):
				t.Errorf("watchertest: Run did not return %s after its context ended", DefaultTimeout)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
