package fetchgate

import (
	"context"
	"slices"
	"sync"

	"github.com/modwatch/modwatch/watcher/internal/pool"
)

// Waiter is a task that may wait in a gate's line for a slot (the
// watcher's remotes): it is scheduled on the gate's pool when a slot is
// handed to it.
type Waiter interface {
	pool.Task
	// Place is the waiter's state in the gate.
	Place() *Place
}

// Place is a waiter's state in its gate, guarded by the gate; its zero
// value is a waiter out of line.
type Place struct {
	parked  bool // in the gate's line
	granted bool // a slot was handed to it
	asking  bool // it waits for answers that may spare its fetch: passed over
}

// Gate bounds the fetches in progress (the fetch limit). A poll that
// finds every slot taken does not wait on a worker of the poll pool: its
// remote parks in line, the worker goes on to other remotes' listings, and
// a slot that frees is handed to the first remote in line, whose next step
// fetches. A remote in line whose deliverers are still being asked whether
// they need its fetch at all (see SetAsking) is passed over until they
// answer: a slot is not spent on a clone an answer may spare. Other
// fetches (a submodule's, the files of a partial mirror) wait for a slot
// in Acquire.
type Gate struct {
	sem   chan struct{} // a slot taken is an element
	polls *pool.Pool    // where a parked waiter is scheduled

	mu      sync.Mutex
	waiting []Waiter // parked, first come first served
}

// New returns a gate of limit slots (one at least) whose waiters are
// scheduled on polls.
func New(limit int, polls *pool.Pool) *Gate {
	return &Gate{sem: make(chan struct{}, max(limit, 1)), polls: polls}
}

// Acquire waits for a slot, or for ctx to end.
func (g *Gate) Acquire(ctx context.Context) error {
	select {
	case g.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TryOrPark takes a slot for r: one handed to it, or a free one. With
// none, r waits in line (once, however often it asks) and false is
// returned: r is scheduled again when a slot is handed to it.
func (g *Gate) TryOrPark(r Waiter) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := r.Place()
	if p.granted {
		p.granted = false
		return true
	}
	if !p.asking {
		select {
		case g.sem <- struct{}{}:
			g.unpark(r) // a slot freed while the line was asking
			return true
		default:
		}
	}
	if !p.parked {
		p.parked = true
		g.waiting = append(g.waiting, r)
	}
	return false
}

// Release gives a slot back: to the first waiter in line that is not
// waiting for its deliverers' answers, or free.
func (g *Gate) Release() {
	g.mu.Lock()
	i := slices.IndexFunc(g.waiting, func(w Waiter) bool { return !w.Place().asking })
	if i < 0 {
		<-g.sem
		g.mu.Unlock()
		return
	}
	r := g.waiting[i]
	g.waiting = slices.Delete(g.waiting, i, i+1)
	r.Place().parked, r.Place().granted = false, true
	g.mu.Unlock()
	g.polls.Schedule(r)
}

// SetAsking marks whether r waits for answers that may spare its fetch:
// while it does, no slot is taken by or handed to it.
func (g *Gate) SetAsking(r Waiter, asking bool) {
	g.mu.Lock()
	r.Place().asking = asking
	g.mu.Unlock()
}

// Leave takes r out of line (it ended, or its poll needs no fetch after
// all), and passes on a slot that was handed to it.
func (g *Gate) Leave(r Waiter) {
	g.mu.Lock()
	g.unpark(r)
	p := r.Place()
	granted := p.granted
	p.granted, p.asking = false, false
	g.mu.Unlock()
	if granted {
		g.Release()
	}
}

// unpark takes r out of line; g.mu is held.
func (g *Gate) unpark(r Waiter) {
	p := r.Place()
	if p.parked {
		p.parked = false
		if i := slices.Index(g.waiting, r); i >= 0 {
			g.waiting = slices.Delete(g.waiting, i, i+1)
		}
	}
}
