package webhook

import (
	"sync"
	"time"
)

// limiter passes at most one hint per repository per interval; hints in
// between are coalesced into one at the end of the interval. It remembers
// only repositories that are watched, and forgets them an interval after
// their last hint, so its memory is bounded by the watched set however
// many URLs senders make up.
type limiter struct {
	interval time.Duration
	t        Triggerer

	mu        sync.Mutex
	last      map[string]time.Time // watched keys by the time of their last trigger
	pending   map[string]*time.Timer
	lastSweep time.Time
	closed    bool
}

func newLimiter(interval time.Duration, t Triggerer) *limiter {
	return &limiter{
		interval: interval, t: t,
		last: map[string]time.Time{}, pending: map[string]*time.Timer{},
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
	l.sweep(now)
	if last, ok := l.last[key]; ok {
		if wait := l.interval - now.Sub(last); wait > 0 {
			// Coalesced: a watched repository hinted within its interval
			// is polled once at the end of it.
			if _, ok := l.pending[key]; !ok {
				l.pending[key] = time.AfterFunc(wait, func() { l.fire(key, url) })
			}
			l.mu.Unlock()
			return true
		}
	}
	l.mu.Unlock()
	// An unwatched URL costs the watcher a lookup, like the limiter's own,
	// and is not remembered.
	watched := l.t.Trigger(url)
	l.mu.Lock()
	if watched {
		l.last[key] = now
	} else {
		delete(l.last, key)
	}
	l.mu.Unlock()
	return watched
}

// sweep forgets, at most once per interval, the keys whose interval is
// over; the caller holds l.mu.
func (l *limiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < l.interval {
		return
	}
	l.lastSweep = now
	for k, last := range l.last {
		if _, ok := l.pending[k]; !ok && now.Sub(last) >= l.interval {
			delete(l.last, k)
		}
	}
}

// size is how many keys the limiter remembers.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.last) + len(l.pending)
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
