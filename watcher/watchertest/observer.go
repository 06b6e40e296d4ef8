package watchertest

import (
	"slices"
	"sync"
	"testing"

	"github.com/modwatch/modwatch/watcher"
)

// Observer is a watcher.Observer that records every event.
type Observer struct {
	b      broadcast
	mu     sync.Mutex
	events []watcher.Event
}

var _ watcher.Observer = (*Observer)(nil)

// NewObserver returns an empty recording observer.
func NewObserver() *Observer { return &Observer{} }

// Observe implements watcher.Observer.
func (o *Observer) Observe(e watcher.Event) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
	o.b.notify()
}

// Events returns the events so far, in order.
func (o *Observer) Events() []watcher.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.events)
}

// Count returns how many events so far match.
func (o *Observer) Count(match func(watcher.Event) bool) int {
	n := 0
	for _, e := range o.Events() {
		if match(e) {
			n++
		}
	}
	return n
}

// WaitFor waits for an event that matches and returns the first one.
func (o *Observer) WaitFor(t testing.TB, what string, match func(watcher.Event) bool) watcher.Event {
	t.Helper()
	var found watcher.Event
	waitUntil(t, &o.b, what, func() bool {
		for _, e := range o.Events() {
			if match(e) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// WaitCount waits until at least n events match.
func (o *Observer) WaitCount(t testing.TB, what string, n int, match func(watcher.Event) bool) {
	t.Helper()
	waitUntil(t, &o.b, what, func() bool { return o.Count(match) >= n })
}

// Is matches events of type typ, for the target with id when id is not "".
func Is(typ watcher.EventType, id string) func(watcher.Event) bool {
	return func(e watcher.Event) bool {
		return e.Type == typ && (id == "" || e.Target != nil && e.Target.ID == id)
	}
}
