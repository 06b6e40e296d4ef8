package hostgate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modwatch/modwatch/watcher/internal/pool"
)

// held checks a gate's accounts: nothing in flight, no slot used, nobody
// in line.
func (g *Gate) checkAccounts(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.used != 0 {
		t.Errorf("listing slots used: %d", g.used)
	}
	for name, h := range g.hosts {
		if h.inFlight != 0 || len(h.fetches)+len(h.hints)+len(h.background) != 0 {
			t.Errorf("host %q: in flight %d, line %d/%d/%d", name, h.inFlight, len(h.fetches), len(h.hints), len(h.background))
		}
	}
}

// A fetch's Acquire cancelled as it is granted gives its turn back.
func TestAnAcquireCancelledAsGrantedGivesItBack(t *testing.T) {
	p := pool.New(t.Context(), 4)
	defer p.Close()
	g := New(4, p, func(string) Budget { return Budget{InFlight: 1} })
	defer g.Close()
	for i := range 3000 {
		if err := g.Acquire(t.Context(), "h"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- g.Acquire(ctx, "h") }()
		for {
			g.mu.Lock()
			n := len(g.hosts["h"].fetches)
			g.mu.Unlock()
			if n == 1 {
				break
			}
			time.Sleep(time.Microsecond)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); cancel() }()
		go func() {
			defer wg.Done()
			if i%3 == 0 {
				g.Pause("h", time.Now().Add(time.Millisecond), errors.New("limited"))
			}
			g.Release("h", false)
		}()
		wg.Wait()
		if err := <-done; err == nil {
			g.Release("h", false)
		}
		for time.Now().Before(g.hosts["h"].until) {
			time.Sleep(100 * time.Microsecond)
		}
		g.checkAccounts(t)
		if t.Failed() {
			t.Fatalf("round %d", i)
		}
	}
}

// waiter is a remote-like task: each round, a listing turn, a request,
// its release; it may be stopped any time.
type waiter struct {
	g       *Gate
	p       *pool.Pool
	host    string
	slot    pool.Slot
	place   Place
	stopped atomic.Bool
	rounds  int
	want    int
	mu      sync.Mutex
	hinted  bool
	done    chan struct{}
	flight  *atomic.Int64
	maxF    *atomic.Int64
}

func (w *waiter) Slot() *pool.Slot  { return &w.slot }
func (w *waiter) HostPlace() *Place { return &w.place }
func (w *waiter) Finish()           { w.g.Leave(w); close(w.done) }
func (w *waiter) Step(context.Context) bool {
	if w.stopped.Load() || w.rounds >= w.want {
		return true
	}
	w.mu.Lock()
	hinted := w.hinted
	w.hinted = false
	w.mu.Unlock()
	if !w.g.TryOrPark(w, w.host, hinted) {
		return false
	}
	n := w.flight.Add(1)
	for {
		m := w.maxF.Load()
		if n <= m || w.maxF.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
	w.flight.Add(-1)
	w.g.Release(w.host, true)
	w.rounds++
	if rand.IntN(3) == 0 {
		w.mu.Lock()
		w.hinted = true
		w.mu.Unlock()
	}
	w.p.Schedule(w)
	return false
}

// Many remotes on a few hosts, limits beginning and ending, remotes
// stopped at random, hints: every remote not stopped gets its rounds, and
// the gate ends with nothing in flight.
func TestTheGateUnderChurn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := pool.New(ctx, 20)
	g := New(6, p, func(h string) Budget {
		if h == "rated" {
			return Budget{InFlight: 2, PerSecond: 500, Burst: 2}
		}
		return Budget{InFlight: 3}
	})
	hosts := []string{"a", "b", "rated", ""}
	flights := map[string]*[2]atomic.Int64{}
	for _, h := range hosts {
		flights[h] = &[2]atomic.Int64{}
	}
	var ws []*waiter
	for i := range 200 {
		h := hosts[i%len(hosts)]
		w := &waiter{g: g, p: p, host: h, want: 5, done: make(chan struct{}), flight: &flights[h][0], maxF: &flights[h][1]}
		ws = append(ws, w)
	}
	for _, w := range ws {
		p.Start(w)
	}
	stopChaos := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopChaos:
				return
			case <-time.After(time.Duration(rand.IntN(5)) * time.Millisecond):
			}
			g.Pause(hosts[rand.IntN(len(hosts))], time.Now().Add(time.Duration(rand.IntN(20))*time.Millisecond), errors.New("limited"))
		}
	}()
	go func() {
		defer wg.Done()
		for _, w := range ws {
			if rand.IntN(4) == 0 {
				w.stopped.Store(true)
				p.Schedule(w)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	wedged := 0
	deadline := time.After(60 * time.Second)
	for i, w := range ws {
		select {
		case <-w.done:
		case <-deadline:
			wedged++
			_ = i
		}
	}
	close(stopChaos)
	wg.Wait()
	if wedged > 0 {
		g.mu.Lock()
		for name, h := range g.hosts {
			t.Logf("host %q: in flight %d, line %d/%d/%d, until %v", name, h.inFlight, len(h.fetches), len(h.hints), len(h.background), time.Until(h.until))
		}
		t.Logf("used %d, ring %d, wakeAt %v", g.used, len(g.ring), time.Until(g.wakeAt))
		g.mu.Unlock()
		t.Errorf("%d remotes never finished their rounds", wedged)
	}
	for _, w := range ws {
		if !w.stopped.Load() && w.rounds < w.want {
			select {
			case <-w.done:
				t.Errorf("remote ended with %d rounds of %d", w.rounds, w.want)
			default:
			}
		}
	}
	for h, f := range flights {
		t.Logf("host %q: most in flight %d", h, f[1].Load())
	}
	cancel()
	p.Close()
	g.Close()
	g.checkAccounts(t)
	_ = fmt.Sprint
}

// Nothing leaks when remotes go: a host nobody waits at nor sends to, with
// no limit in force, is forgotten. (A .gitmodules names any host it likes.)
func TestIdleHostsAreForgotten(t *testing.T) {
	p := pool.New(t.Context(), 4)
	defer p.Close()
	g := New(4, p, func(string) Budget { return Budget{InFlight: 8} })
	defer g.Close()
	for i := range 100000 {
		h := fmt.Sprintf("h%d.example.com", i)
		if err := g.Acquire(t.Context(), h); err != nil {
			t.Fatal(err)
		}
		g.Release(h, false)
	}
	g.checkAccounts(t)
	g.mu.Lock()
	n := len(g.hosts)
	g.mu.Unlock()
	if n > 1000 {
		t.Errorf("the gate keeps %d idle hosts", n)
	}
}
