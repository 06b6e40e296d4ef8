package pool

import (
	"context"
	"sync"
)

// Task is what a pool runs (the watcher's: a deliverer, a delivery or a
// removal attempt per step; a remote, a poll per step).
type Task interface {
	// Step does what there is to do now; true when the task has ended.
	Step(ctx context.Context) bool
	// Finish is called once, when the task has ended or the pool closed.
	Finish()
	// Slot is the task's place in its pool.
	Slot() *Slot
}

// Slot is a task's scheduling state, guarded by its pool's mu; its zero
// value is a task not scheduled.
type Slot struct {
	scheduled bool // queued or in a step
	again     bool // scheduled during its step: another step after it
}

// Pool runs tasks on a bounded number of goroutines. A task with
// something to do is queued once, first come first served; a worker takes
// it and does one step of it, and queues it again when more came
// meanwhile. So the steps of one task stay one at a time
// and in order, and every task waits behind at most the others' single
// steps. Workers start when there is work, up to the limit, and end when
// there is none.
type Pool struct {
	ctx   context.Context
	limit int

	mu      sync.Mutex
	queue   []Task
	workers int
	closed  bool
	live    map[Task]struct{} // started and not ended
	wg      sync.WaitGroup
}

// New returns a pool of at most limit workers (one at least), whose tasks
// step until ctx ends.
func New(ctx context.Context, limit int) *Pool {
	return &Pool{ctx: ctx, limit: max(limit, 1), live: map[Task]struct{}{}}
}

// Start adds d to the pool and gives it a first step (it may have been
// told something already). A task started after Close never runs.
func (p *Pool) Start(d Task) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.live[d] = struct{}{}
	p.mu.Unlock()
	p.Schedule(d)
}

// Schedule queues d for a step, unless it is queued or in a step already:
// then it has another step after that one.
func (p *Pool) Schedule(d Task) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.live[d]; !ok || p.closed {
		return
	}
	s := d.Slot()
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

// work does steps until the queue is empty or the pool's ctx ends.
func (p *Pool) work() {
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

		ended := d.Step(p.ctx)

		p.mu.Lock()
		s := d.Slot()
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
			d.Finish()
		}
	}
}

// Close waits for the workers, then finishes every task left; nothing is
// scheduled again.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	live := p.live
	p.live, p.queue = map[Task]struct{}{}, nil
	p.mu.Unlock()
	for d := range live {
		d.Finish()
	}
}
