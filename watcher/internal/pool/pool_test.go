package pool_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/watcher/internal/pool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// task counts its steps; a step may schedule it again, and it ends after
// steps.
type task struct {
	p      *pool.Pool
	slot   pool.Slot
	steps  int
	more   int // steps that schedule it again
	ends   int // the step that ends it (0: none)
	active sync.Mutex
	done   chan struct{}
	mu     sync.Mutex
	finish int
}

func (t *task) Slot() *pool.Slot { return &t.slot }

func (t *task) Step(context.Context) bool {
	if !t.active.TryLock() {
		panic("two steps of one task at once")
	}
	defer t.active.Unlock()
	t.steps++
	if t.more > 0 {
		t.more--
		t.p.Schedule(t)
	}
	return t.ends != 0 && t.steps >= t.ends
}

func (t *task) Finish() {
	t.mu.Lock()
	t.finish++
	t.mu.Unlock()
	close(t.done)
}

// A task scheduled during its step has one more step after it, never at
// the same time; it is finished once it ends.
func TestStepsOneAtATimeUntilTheTaskEnds(t *testing.T) {
	p := pool.New(t.Context(), 4)
	defer p.Close()
	tk := &task{p: p, more: 5, ends: 6, done: make(chan struct{})}
	p.Start(tk)
	<-tk.done
	assert.Equal(t, 6, tk.steps)
	assert.Equal(t, 1, tk.finish)
	p.Schedule(tk) // ended: not stepped again
}

// Close finishes the tasks that have not ended, and a task started after
// it never runs.
func TestCloseFinishesWhatIsLeft(t *testing.T) {
	p := pool.New(t.Context(), 1)
	idle := &task{p: p, done: make(chan struct{})}
	p.Start(idle)
	p.Close()
	<-idle.done
	assert.Equal(t, 1, idle.steps)
	assert.Equal(t, 1, idle.finish)
	late := &task{p: p, done: make(chan struct{})}
	p.Start(late)
	assert.Zero(t, late.steps)
}
