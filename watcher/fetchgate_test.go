package watcher

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fetch gate's slot goes to the remotes in line first come first
// served, is never lost when a remote ends in line or with a slot handed
// to it, and is free again once nobody waits.
func TestFetchGateHandsSlotsOn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newFetchGate(1, newPool(ctx, 1)) // the remotes are not in the pool: scheduling them does nothing
	a, b, c, d := &remote{}, &remote{}, &remote{}, &remote{}

	require.True(t, g.tryOrPark(a), "a free slot")
	assert.False(t, g.tryOrPark(b))
	assert.False(t, g.tryOrPark(c))
	assert.False(t, g.tryOrPark(b), "asking again keeps b's place")
	assert.False(t, g.tryOrPark(d))
	assert.Equal(t, []*remote{b, c, d}, g.waiting)

	g.leave(c) // ends in line
	assert.Equal(t, []*remote{b, d}, g.waiting)
	g.release() // a is done: the slot is b's
	assert.True(t, b.granted)
	g.leave(b) // ends before its step: the slot goes on to d
	assert.False(t, b.granted)
	assert.True(t, d.granted)
	assert.Empty(t, g.waiting)
	assert.True(t, g.tryOrPark(d), "the slot handed to d")
	assert.False(t, d.granted)

	waited := make(chan error, 1)
	go func() { waited <- g.acquire(ctx) }() // a submodule's fetch waits
	g.release()                              // nobody in line: the slot is free
	require.NoError(t, <-waited)
	g.release()
	require.True(t, g.tryOrPark(a), "free again")
	g.release()
	assert.Empty(t, g.sem)
}

// A remote in line whose deliverers are being asked whether it needs its
// fetch is passed over: a slot that frees goes to the next in line that
// is not asking, or is free when all are. A remote that takes such a free
// slot leaves the line, so that no slot is handed to it twice (a slot
// handed to a remote that no longer waits is never given back).
func TestFetchGatePassesOverRemotesAsking(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newFetchGate(1, newPool(ctx, 1))
	a, b, c := &remote{}, &remote{}, &remote{}

	require.True(t, g.tryOrPark(a))
	assert.False(t, g.tryOrPark(b))
	g.setAsking(b, true)
	assert.False(t, g.tryOrPark(c))
	g.release() // a is done: b asks, so the slot is c's
	assert.False(t, b.granted)
	assert.True(t, c.granted)
	assert.Equal(t, []*remote{b}, g.waiting)
	assert.True(t, g.tryOrPark(c))

	g.release() // c is done, and b still asks: the slot is free
	assert.Empty(t, g.sem)
	assert.False(t, g.tryOrPark(b), "no slot while it asks, free or not")
	g.setAsking(b, false) // answered: it needs the fetch
	require.True(t, g.tryOrPark(b), "the free slot")
	assert.Empty(t, g.waiting, "out of line with the slot it took")
	assert.False(t, b.parked)

	assert.False(t, g.tryOrPark(a))
	g.release() // b is done: the slot is a's, and nobody else's
	assert.True(t, a.granted)
	assert.False(t, b.granted)
	require.True(t, g.tryOrPark(a))
	g.release()
	assert.Empty(t, g.sem, "every slot given back")
	assert.Empty(t, g.waiting)
}
