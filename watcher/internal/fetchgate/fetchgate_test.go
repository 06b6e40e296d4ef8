package fetchgate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/watcher/internal/pool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waiter is a remote, as the gate sees it.
type waiter struct {
	place Place
	slot  pool.Slot
}

func (w *waiter) Step(context.Context) bool { return true }
func (w *waiter) Finish()                   {}
func (w *waiter) Slot() *pool.Slot          { return &w.slot }
func (w *waiter) Place() *Place             { return &w.place }

// The fetch gate's slot goes to the remotes in line first come first
// served, is never lost when a remote ends in line or with a slot handed
// to it, and is free again once nobody waits.
func TestHandsSlotsOn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := New(1, pool.New(ctx, 1)) // the remotes are not in the pool: scheduling them does nothing
	a, b, c, d := &waiter{}, &waiter{}, &waiter{}, &waiter{}

	require.True(t, g.TryOrPark(a), "a free slot")
	assert.False(t, g.TryOrPark(b))
	assert.False(t, g.TryOrPark(c))
	assert.False(t, g.TryOrPark(b), "asking again keeps b's place")
	assert.False(t, g.TryOrPark(d))
	assert.Equal(t, []Waiter{b, c, d}, g.waiting)

	g.Leave(c) // ends in line
	assert.Equal(t, []Waiter{b, d}, g.waiting)
	g.Release() // a is done: the slot is b's
	assert.True(t, b.place.granted)
	g.Leave(b) // ends before its step: the slot goes on to d
	assert.False(t, b.place.granted)
	assert.True(t, d.place.granted)
	assert.Empty(t, g.waiting)
	assert.True(t, g.TryOrPark(d), "the slot handed to d")
	assert.False(t, d.place.granted)

	waited := make(chan error, 1)
	go func() { waited <- g.Acquire(ctx) }() // a submodule's fetch waits
	g.Release()                              // nobody in line: the slot is free
	require.NoError(t, <-waited)
	g.Release()
	require.True(t, g.TryOrPark(a), "free again")
	g.Release()
	assert.Empty(t, g.sem)
}

// A remote in line whose deliverers are being asked whether it needs its
// fetch is passed over: a slot that frees goes to the next in line that
// is not asking, or is free when all are. A remote that takes such a free
// slot leaves the line, so that no slot is handed to it twice (a slot
// handed to a remote that no longer waits is never given back).
func TestPassesOverWaitersAsking(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := New(1, pool.New(ctx, 1))
	a, b, c := &waiter{}, &waiter{}, &waiter{}

	require.True(t, g.TryOrPark(a))
	assert.False(t, g.TryOrPark(b))
	g.SetAsking(b, true)
	assert.False(t, g.TryOrPark(c))
	g.Release() // a is done: b asks, so the slot is c's
	assert.False(t, b.place.granted)
	assert.True(t, c.place.granted)
	assert.Equal(t, []Waiter{b}, g.waiting)
	assert.True(t, g.TryOrPark(c))

	g.Release() // c is done, and b still asks: the slot is free
	assert.Empty(t, g.sem)
	assert.False(t, g.TryOrPark(b), "no slot while it asks, free or not")
	g.SetAsking(b, false) // answered: it needs the fetch
	require.True(t, g.TryOrPark(b), "the free slot")
	assert.Empty(t, g.waiting, "out of line with the slot it took")
	assert.False(t, b.place.parked)

	assert.False(t, g.TryOrPark(a))
	g.Release() // b is done: the slot is a's, and nobody else's
	assert.True(t, a.place.granted)
	assert.False(t, b.place.granted)
	require.True(t, g.TryOrPark(a))
	g.Release()
	assert.Empty(t, g.sem, "every slot given back")
	assert.Empty(t, g.waiting)
}
