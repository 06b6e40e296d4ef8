package watcher

import (
	"context"
	"sync"
)

// task is what a pool runs: a deliverer (a delivery or a removal attempt
// per step) or a remote (a poll per step).
type task interface {
	// step does what there is to do now; true when the task has ended.
	step(ctx context.Context) bool
	// finish is called once, when the task has ended or the pool closed.
	finish()
	// slot is the task's place in its pool.
	slot() *slot
}

// slot is a task's scheduling state, guarded by its pool's mu.
type slot struct {
	scheduled bool // queued or in a step
	again     bool // scheduled during its step: another step after it
}

// pool runs tasks on a bounded number of goroutines, so that a target with
// nothing to deliver, or a remote between polls, costs its state and no
// goroutine. A task with something to do is queued once, first come first
// served; a worker takes it and does one step of it, and queues it again
// when more came meanwhile. So the steps of one task stay one at a time
// and in order, and every task waits behind at most the others' single
// steps. Workers start when there is work, up to the limit, and end when
// there is none.
type pool struct {
	ctx   context.Context
	limit int

	mu      sync.Mutex
	queue   []task
	workers int
	closed  bool
	live    map[task]struct{} // started and not ended
	wg      sync.WaitGroup
}

func newPool(ctx context.Context, limit int) *pool {
	return &pool{ctx: ctx, limit: max(limit, 1), live: map[task]struct{}{}}
}

// start adds d to the pool and gives it a first step (it may have been
// told something already). A task started after close never runs: the
// watcher is stopping.
func (p *pool) start(d task) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.live[d] = struct{}{}
	p.mu.Unlock()
	p.schedule(d)
}

// schedule queues d for a step, unless it is queued or in a step already:
// then it has another step after that one.
func (p *pool) schedule(d task) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.live[d]; !ok || p.closed {
		return
	}
	s := d.slot()
	if s.scheduled {
		s.again = true
		return
	}
	s.scheduled = true
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
		s := d.slot()
		switch {
		case ended:
			delete(p.live, d)
		case s.again:
			s.again = false
			p.queue = append(p.queue, d)
		default:
			s.scheduled = false
		}
		p.mu.Unlock()
		if ended {
			d.finish()
		}
	}
}

// close waits for the workers, then finishes every task left: the watcher
// has stopped, and nothing is scheduled again.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	live := p.live
	p.live, p.queue = map[task]struct{}{}, nil
	p.mu.Unlock()
	for d := range live {
		d.finish()
	}
}
