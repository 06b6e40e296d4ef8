package watcher

import (
	"context"
	"sync"
)

// pool runs the deliverers' work on a bounded number of goroutines, so
// that a target with nothing to deliver costs its state and no goroutine.
// A deliverer with something to do is queued once, first come first
// served; a worker takes it and does one step of it (a delivery, a
// removal attempt), and queues it again when more came meanwhile. So the
// deliveries of one deliverer stay one at a time and in order, and every
// deliverer waits behind at most the others' single steps. Workers start
// when there is work, up to the limit, and end when there is none.
type pool struct {
	ctx   context.Context
	limit int

	mu      sync.Mutex
	queue   []*deliverer
	workers int
	closed  bool
	live    map[*deliverer]struct{} // started and not ended
	wg      sync.WaitGroup
}

func newPool(ctx context.Context, limit int) *pool {
	return &pool{ctx: ctx, limit: max(limit, 1), live: map[*deliverer]struct{}{}}
}

// start adds d to the pool and gives it a first step (it may have been
// told something already). A deliverer started after close never runs:
// the watcher is stopping.
func (p *pool) start(d *deliverer) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	d.pool = p
	p.live[d] = struct{}{}
	p.mu.Unlock()
	p.schedule(d)
}

// schedule queues d for a step, unless it is queued or in a step already:
// then it has another step after that one.
func (p *pool) schedule(d *deliverer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.live[d]; !ok || p.closed {
		return
	}
	if d.scheduled {
		d.again = true
		return
	}
	d.scheduled = true
	p.queue = append(p.queue, d)
	if p.workers < p.limit {
		p.workers++
		p.wg.Add(1)
		go p.work()
	}
}

// work does steps until the queue is empty or the watcher stops.
func (p *pool) work() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		if len(p.queue) == 0 || p.ctx.Err() != nil {
			p.workers--
			p.mu.Unlock()
			return
		}
		d := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		p.mu.Unlock()

		ended := d.step(p.ctx)

		p.mu.Lock()
		switch {
		case ended:
			delete(p.live, d)
		case d.again:
			d.again = false
			p.queue = append(p.queue, d)
		default:
			d.scheduled = false
		}
		p.mu.Unlock()
		if ended {
			d.finish()
		}
	}
}

// close waits for the workers, then ends every deliverer left (its retry
// stopped): the watcher has stopped, and nothing is scheduled again.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	live := p.live
	p.live, p.queue = map[*deliverer]struct{}{}, nil
	p.mu.Unlock()
	for d := range live {
		d.st.stopTimer(d)
		d.finish()
	}
}
