package stall

import (
	"context"
	"time"
)

// Watch watches progress while a fetch runs, until ctx ends or stop is
// called: after yieldAfter without any, it calls yield once (the fetch
// gives up its slot); after abortAfter, abort. The returned func stops it
// and waits.
func Watch(ctx context.Context, progress func() int64, yieldAfter, abortAfter time.Duration, yield, abort func()) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		tick := min(yieldAfter, abortAfter) / 4
		last, since, yielded := progress(), time.Now(), false
		for {
			t := time.NewTimer(tick)
			select {
			case <-done:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			now := time.Now()
			if p := progress(); p != last {
				last, since = p, now
				continue
			}
			idle := now.Sub(since)
			if !yielded && idle >= yieldAfter {
				yielded = true
				yield()
			}
			if idle >= abortAfter {
				abort()
				return
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}
