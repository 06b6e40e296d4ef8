package hostgate

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/modwatch/modwatch/watcher/internal/pool"
)

// A Charge of a huge count (a Mirror's FetchResult.Requests is whatever
// the Mirror says) is bounded: the gate, every host, goes on.
func TestAHugeChargeDoesNotHoldTheGate(t *testing.T) {
	polls := pool.New(context.Background(), 1)
	g := New(4, polls, func(string) Budget { return Budget{PerSecond: 1, Burst: 2, InFlight: 8} })
	// No deferred g.Close: it would wait for the lock Charge holds.
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Charge("a.example", math.MaxInt)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		// Another host's fetch cannot get the lock either.
		other := make(chan error, 1)
		go func() { other <- g.Acquire(context.Background(), "b.example") }()
		select {
		case err := <-other:
			t.Fatalf("Charge(MaxInt) still running after 2s, but b.example acquired (%v)", err)
		case <-time.After(time.Second):
			t.Fatalf("Charge(math.MaxInt) still running after 2s, holding the gate's lock: Acquire at another host (b.example) blocks too")
		}
	}
}

// A host charged a large count is not stopped for longer than a few
// requests' time: the debt a turn leaves is bounded.
func TestADebtIsBounded(t *testing.T) {
	polls := pool.New(context.Background(), 1)
	defer polls.Close()
	g := New(4, polls, func(string) Budget { return Budget{PerSecond: 1, Burst: 2, InFlight: 8} })
	defer g.Close()
	g.Charge("a.example", 100_000)
	g.mu.Lock()
	h := g.hosts["a.example"]
	r := h.limiter.ReserveN(time.Now(), 1)
	d := r.Delay()
	r.Cancel()
	g.mu.Unlock()
	if d > time.Hour {
		t.Fatalf("after Charge(100000) the host's next turn is %v away (> 1h, the longest a host's own rate limit may stop it)", d.Round(time.Second))
	}
}
