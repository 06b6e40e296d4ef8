package watcher

import (
	"context"
	"slices"
	"sync"
)

// fetchGate bounds the fetches in progress (the fetch limit). A poll that
// finds every slot taken does not wait on a worker of the poll pool: its
// remote parks in line, the worker goes on to other remotes' listings, and
// a slot that frees is handed to the first remote in line, whose next step
// fetches. Other fetches (a submodule's, the files of a partial mirror)
// wait for a slot in acquire.
type fetchGate struct {
	sem   chan struct{} // a slot taken is an element
	polls *pool         // where a parked remote is scheduled

	mu      sync.Mutex
	waiting []*remote // parked, first come first served
}

func newFetchGate(limit int, polls *pool) *fetchGate {
	return &fetchGate{sem: make(chan struct{}, max(limit, 1)), polls: polls}
}

// acquire waits for a slot, or for ctx to end.
func (g *fetchGate) acquire(ctx context.Context) error {
	select {
	case g.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryOrPark takes a slot for r: one handed to it, or a free one. With
// none, r waits in line (once, however often it asks) and false is
// returned: r is scheduled again when a slot is handed to it.
func (g *fetchGate) tryOrPark(r *remote) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.granted {
		r.granted = false
		return true
	}
	select {
	case g.sem <- struct{}{}:
		return true
	default:
	}
	if !r.parked {
		r.parked = true
		g.waiting = append(g.waiting, r)
	}
	return false
}

// release gives a slot back: to the first remote in line, or free.
func (g *fetchGate) release() {
	g.mu.Lock()
	if len(g.waiting) == 0 {
		<-g.sem
		g.mu.Unlock()
		return
	}
	r := g.waiting[0]
	g.waiting[0] = nil
	g.waiting = g.waiting[1:]
	r.parked, r.granted = false, true
	g.mu.Unlock()
	g.polls.schedule(r)
}

// leave takes r out of line (it ended, or its poll needs no fetch after
// all), and passes on a slot that was handed to it.
func (g *fetchGate) leave(r *remote) {
	g.mu.Lock()
	if r.parked {
		r.parked = false
		if i := slices.Index(g.waiting, r); i >= 0 {
			g.waiting = slices.Delete(g.waiting, i, i+1)
		}
	}
	granted := r.granted
	r.granted = false
	g.mu.Unlock()
	if granted {
		g.release()
	}
}
