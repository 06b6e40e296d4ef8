package hostgate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/modwatch/modwatch/watcher/internal/pool"
)

type a2waiter struct {
	slot  pool.Slot
	place Place
}

func (w *a2waiter) Step(context.Context) bool { return false }
func (w *a2waiter) Finish()                   {}
func (w *a2waiter) Slot() *pool.Slot          { return &w.slot }
func (w *a2waiter) HostPlace() *Place         { return &w.place }

// Turns granted and not yet stepped, then a Pause, a Leave, a give-back
// in TryOrPark: the counters come back to zero.
func TestTheAccountsAfterPausesAndLeaves(t *testing.T) {
	polls := pool.New(context.Background(), 1)
	defer polls.Close()
	g := New(4, polls, func(string) Budget { return Budget{InFlight: 1} })
	defer g.Close()
	a, b, c := &a2waiter{}, &a2waiter{}, &a2waiter{}
	if !g.TryOrPark(a, "h", false) {
		t.Fatal("a: no turn")
	}
	if g.TryOrPark(b, "h", false) || g.TryOrPark(c, "h", true) {
		t.Fatal("b or c had a turn beyond InFlight 1")
	}
	g.Release("h", true) // a's turn goes to c (a hint)
	if c.place.granted == nil {
		t.Fatal("c was not handed the turn")
	}
	g.Pause("h", time.Now().Add(200*time.Millisecond), errors.New("limited"))
	if g.TryOrPark(c, "h", false) {
		t.Fatal("c stepped its turn while the host is paused")
	}
	g.Leave(b)
	g.Leave(c)
	g.mu.Lock()
	h := g.hosts["h"]
	t.Logf("used=%d inFlight=%d listings=%d ring=%d", g.used, h.inFlight, h.listings, len(g.ring))
	if g.used != 0 || h.inFlight != 0 || h.listings != 0 || len(h.hints)+len(h.background) != 0 {
		t.Errorf("after everyone left: used=%d inFlight=%d listings=%d line=%d", g.used, h.inFlight, h.listings, len(h.hints)+len(h.background))
	}
	g.mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	if err := g.Acquire(context.Background(), "h"); err != nil {
		t.Fatal(err)
	}
	g.Release("h", false)
}
