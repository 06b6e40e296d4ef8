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
// fetches. A remote in line whose deliverers are still being asked whether
// they need its fetch at all (see askFirst) is passed over until they
// answer: a slot is not spent on a clone an answer may spare. Other
// fetches (a submodule's, the files of a partial mirror) wait for a slot
// in acquire.
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
	if !r.asking {
		select {
		case g.sem <- struct{}{}:
			g.unpark(r) // a slot freed while the line was asking
			return true
		default:
		}
	}
	if !r.parked {
		r.parked = true
		g.waiting = append(g.waiting, r)
	}
	return false
}

// release gives a slot back: to the first remote in line that is not
// waiting for its deliverers' answers, or free.
func (g *fetchGate) release() {
	g.mu.Lock()
	i := slices.IndexFunc(g.waiting, func(r *remote) bool { return !r.asking })
	if i < 0 {
		<-g.sem
		g.mu.Unlock()
		return
	}
	r := g.waiting[i]
	g.waiting = slices.Delete(g.waiting, i, i+1)
	r.parked, r.granted = false, true
	g.mu.Unlock()
	g.polls.schedule(r)
}

// setAsking marks whether r waits for its deliverers' answers (see ask):
// while it does, no slot is taken by or handed to it.
func (g *fetchGate) setAsking(r *remote, asking bool) {
	g.mu.Lock()
	r.asking = asking
	g.mu.Unlock()
}

// leave takes r out of line (it ended, or its poll needs no fetch after
// all), and passes on a slot that was handed to it.
func (g *fetchGate) leave(r *remote) {
	g.mu.Lock()
	g.unpark(r)
	granted := r.granted
	r.granted, r.asking = false, false
	g.mu.Unlock()
	if granted {
		g.release()
	}
}

// unpark takes r out of line; g.mu is held.
func (g *fetchGate) unpark(r *remote) {
	if r.parked {
		r.parked = false
		if i := slices.Index(g.waiting, r); i >= 0 {
			g.waiting = slices.Delete(g.waiting, i, i+1)
		}
	}
}
