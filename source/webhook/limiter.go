package webhook

import (
	"sync"
	"time"
)

// limiter passes at most one hint per repository per interval; hints in
// between are coalesced into one at the end of the interval.
type limiter struct {
	interval time.Duration
	t        Triggerer

	mu      sync.Mutex
	last    map[string]time.Time
	watched map[string]bool // what the last trigger of each key answered
	pending map[string]*time.Timer
	closed  bool
}

func newLimiter(interval time.Duration, t Triggerer) *limiter {
	return &limiter{
		interval: interval, t: t,
		last: map[string]time.Time{}, watched: map[string]bool{}, pending: map[string]*time.Timer{},
	}
}

// hint triggers url now, or once at the end of key's interval; it reports
// whether the repository is watched (as far as the last trigger knew).
func (l *limiter) hint(key, url string) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	now := time.Now()
	wait := l.interval - now.Sub(l.last[key])
	if wait > 0 {
		// Coalesced: answered like the trigger it follows, and polled once
		// at the end of the interval if that one was watched.
		watched := l.watched[key]
		if _, ok := l.pending[key]; !ok && watched {
			l.pending[key] = time.AfterFunc(wait, func() { l.fire(key, url) })
		}
		l.mu.Unlock()
		return watched
	}
	l.last[key] = now
	l.mu.Unlock()
	watched := l.t.Trigger(url)
	l.mu.Lock()
	l.watched[key] = watched
	l.mu.Unlock()
	return watched
}

func (l *limiter) fire(key, url string) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	delete(l.pending, key)
	l.last[key] = time.Now()
	l.mu.Unlock()
	l.t.Trigger(url)
}

func (l *limiter) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for k, t := range l.pending {
		t.Stop()
		delete(l.pending, k)
	}
}
