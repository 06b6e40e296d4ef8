package watchertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
)

// Sink is a watcher.Sink and watcher.Remover that records what it is given.
// A hook set with SetHook runs first and can fail or block a delivery.
type Sink struct {
	name string
	b    broadcast

	mu        sync.Mutex
	hook      func(ctx context.Context, c watcher.Change) error
	attempts  []watcher.Change
	delivered []watcher.Change
	removed   []watcher.Target
}

var (
	_ watcher.Sink    = (*Sink)(nil)
	_ watcher.Remover = (*Sink)(nil)
	_ watcher.Namer   = (*Sink)(nil)
)

// NewSink returns a recording sink with a name.
func NewSink(name string) *Sink { return &Sink{name: name} }

// Name implements watcher.Namer.
func (s *Sink) Name() string { return s.name }

// SetHook sets a function called at the start of every delivery; its error
// fails the delivery. It may block (honouring ctx) to make a slow sink.
func (s *Sink) SetHook(hook func(ctx context.Context, c watcher.Change) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = hook
}

// Deliver implements watcher.Sink.
func (s *Sink) Deliver(ctx context.Context, c watcher.Change) error {
	s.mu.Lock()
	s.attempts = append(s.attempts, c)
	hook := s.hook
	s.mu.Unlock()
	s.b.notify()
	if hook != nil {
		if err := hook(ctx, c); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.delivered = append(s.delivered, c)
	s.mu.Unlock()
	s.b.notify()
	return nil
}

// Remove implements watcher.Remover.
func (s *Sink) Remove(_ context.Context, t watcher.Target) error {
	s.mu.Lock()
	s.removed = append(s.removed, t)
	s.mu.Unlock()
	s.b.notify()
	return nil
}

// Delivered returns the successful deliveries so far, in order.
func (s *Sink) Delivered() []watcher.Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.delivered)
}

// Attempts returns every call to Deliver so far, failed ones included.
func (s *Sink) Attempts() []watcher.Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.attempts)
}

// Removed returns the targets removed so far.
func (s *Sink) Removed() []watcher.Target {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.removed)
}

// WaitDelivered waits until at least n deliveries succeeded and returns
// them all.
func (s *Sink) WaitDelivered(t testing.TB, n int) []watcher.Change {
	t.Helper()
	waitUntil(t, &s.b, fmt.Sprintf("%d deliveries to %s", n, s.name), func() bool { return len(s.Delivered()) >= n })
	return s.Delivered()
}

// WaitDelivery waits for a successful delivery that matches and returns it.
func (s *Sink) WaitDelivery(t testing.TB, match func(watcher.Change) bool) watcher.Change {
	t.Helper()
	var found watcher.Change
	waitUntil(t, &s.b, "a matching delivery to "+s.name, func() bool {
		for _, c := range s.Delivered() {
			if match(c) {
				found = c
				return true
			}
		}
		return false
	})
	return found
}

// WaitCommit waits until the target's latest successful delivery is commit.
// The watcher records its checkpoint after Deliver returns: wait for a
// watcher.EventDelivered (see Observer) before reading the Store.
func (s *Sink) WaitCommit(t testing.TB, targetID string, commit gitutil.Hash) watcher.Change {
	t.Helper()
	var found watcher.Change
	waitUntil(t, &s.b, fmt.Sprintf("%s to deliver %s at %s", s.name, targetID, commit), func() bool {
		ds := s.Delivered()
		for i := len(ds) - 1; i >= 0; i-- {
			if ds[i].Target.ID == targetID {
				found = ds[i]
				return ds[i].To == commit
			}
		}
		return false
	})
	return found
}

// WaitAttempts waits until Deliver was called at least n times.
func (s *Sink) WaitAttempts(t testing.TB, n int) []watcher.Change {
	t.Helper()
	waitUntil(t, &s.b, fmt.Sprintf("%d delivery attempts to %s", n, s.name), func() bool { return len(s.Attempts()) >= n })
	return s.Attempts()
}

// WaitRemoved waits until the target with id was removed.
func (s *Sink) WaitRemoved(t testing.TB, id string) {
	t.Helper()
	waitUntil(t, &s.b, fmt.Sprintf("%s to remove %s", s.name, id), func() bool {
		return slices.ContainsFunc(s.Removed(), func(r watcher.Target) bool { return r.ID == id })
	})
}
