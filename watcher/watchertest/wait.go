package watchertest

import (
	"sync"
	"testing"
	"time"
)

// DefaultTimeout is how long the Wait helpers wait before failing the test.
const DefaultTimeout = 30 * time.Second

// broadcast wakes every waiter each time something is recorded.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// waitUntil polls cond each time b fires, failing t after DefaultTimeout.
func waitUntil(t testing.TB, b *broadcast, what string, cond func() bool) {
	t.Helper()
	timer := time.NewTimer(DefaultTimeout)
	defer timer.Stop()
	for {
		ch := b.wait()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("watchertest: timed out after %s waiting for %s", DefaultTimeout, what)
		}
	}
}
