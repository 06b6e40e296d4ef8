package hostgate

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/modwatch/modwatch/watcher/internal/pool"
)

// Budget is what one host may be sent: requests in progress at once, and
// requests per second with a burst. A zero PerSecond bounds no rate.
//
// A turn costs one request of the rate; what it sent past that is
// charged after it (see Charge), and later turns wait for it. Until a
// listing at the host succeeded, a listing costs two: it asks for the
// host's capabilities first (see Listed).
type Budget struct {
	PerSecond float64
	Burst     int
	InFlight  int
}

// Waiter is a task that may wait in a gate's line for its turn at a host
// (the watcher's remotes, before a listing): it is scheduled on the
// gate's pool when its turn is handed to it.
type Waiter interface {
	pool.Task
	// Place is the waiter's state in the gate.
	HostPlace() *Place
}

// Place is a waiter's state in its gate, guarded by the gate; its zero
// value is a waiter out of line.
type Place struct {
	host    *host // where it is in line
	hinted  bool  // in the host's line of hints
	granted *host // where its turn was handed to it
}

// Gate hands out turns at hosts: a turn is one request (a listing, a
// fetch), within the host's budget (see Budget), for as long as the
// host's rate limit allows (see Pause), and, for a listing, within the
// listing slots every host shares. A remote whose host has no turn for it
// does not wait on a worker of the poll pool: it parks in its host's line
// and is scheduled when its turn comes. Hosts take turns at the slots
// that free, one at a time round the hosts in line, so a slow or limited
// host cannot hold them all; in a host's line, hints go before background
// polls, and fetches (see Acquire) before both.
type Gate struct {
	polls  *pool.Pool
	budget func(host string) Budget
	slots  int // listing slots, shared by every host

	mu     sync.Mutex
	used   int // listing slots taken
	hosts  map[string]*host
	ring   []*host // hosts with someone in line, taking turns
	next   int     // whose turn is first in ring
	timer  *time.Timer
	wakeAt time.Time // when the timer is set for, or zero
	closed bool
	sweep  int // the number of hosts past which idle ones are forgotten
}

// host is one host's budget and line.
type host struct {
	name     string
	budget   Budget
	limiter  *rate.Limiter // nil: no rate bound
	inFlight int
	listings int       // of inFlight, listings: at most half the slots
	known    bool      // a listing succeeded: the next cost one request
	hintRun  int       // hints handed a turn in a row while background polls wait
	until    time.Time // no request before then (a rate limit)
	cause    error     // the answer that said so
	inRing   bool
	// Its line: fetches waiting in Acquire, hints, background polls.
	fetches    []*acquirer
	hints      []Waiter
	background []Waiter
}

// acquirer is a fetch waiting in Acquire for its turn.
type acquirer struct {
	granted chan struct{} // closed with the turn, or with err
	err     error
}

// minBurst is the least burst of a rate: a listing's first turns cost
// two.
const minBurst = 2

// hintRunMax is how many hints in a row take their host's turns while
// background polls wait: then one of these goes, so that a storm of
// hints does not stop the host's other remotes being polled.
const hintRunMax = 4

// maxCharge bounds what one turn is charged after it: a fetch sends a
// few requests (the git CLI's three, a damaged mirror's fetch again), and
// a Mirror that says more is not believed past it.
const maxCharge = 8

// MaxIdleHosts bounds the hosts a gate keeps with nothing in progress,
// nothing in line and no rate limit (a submodule may name any host): past
// it, they are forgotten, their rate's tokens with them.
const MaxIdleHosts = 1024

// New returns a gate of slots listing slots whose waiters are scheduled
// on polls, with each host's budget from budget.
func New(slots int, polls *pool.Pool, budget func(host string) Budget) *Gate {
	return &Gate{polls: polls, budget: budget, slots: max(slots, 1), hosts: map[string]*host{}}
}

// Close stops the gate's timer; waiters in line stay there.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.timer != nil {
		g.timer.Stop()
	}
}

// hostOf returns the host named name, made on first use; g.mu is held.
func (g *Gate) hostOf(name string) *host {
	if h, ok := g.hosts[name]; ok {
		return h
	}
	b := g.budget(name)
	h := &host{name: name, budget: b}
	if b.PerSecond > 0 {
		h.limiter = rate.NewLimiter(rate.Limit(b.PerSecond), max(b.Burst, minBurst))
	}
	g.hosts[name] = h
	return h
}

// TryOrPark takes a listing turn at host for w: one handed to it, or one
// free now (after the waiters ahead of it in its host's line). With none,
// w waits in line (once, however often it asks; a hint moves it ahead of
// background polls) and false is returned: w is scheduled again when its
// turn is handed to it.
func (g *Gate) TryOrPark(w Waiter, name string, hinted bool) bool {
	g.mu.Lock()
	now := time.Now()
	p := w.HostPlace()
	if h := p.granted; h != nil {
		p.granted = nil
		if !now.Before(h.until) {
			g.mu.Unlock()
			return true
		}
		// A rate limit began since: the turn goes back, and w in line.
		h.inFlight--
		h.listings--
		g.used--
		g.park(w, h, true)
	}
	grants := g.dispatch(now)
	if h := p.granted; h != nil && !now.Before(h.until) { // its own turn came in that dispatch
		p.granted = nil
		g.mu.Unlock()
		g.schedule(grants, w)
		return true
	}
	h := g.hostOf(name)
	jumps := hinted && len(h.background) > 0 // ahead of background polls
	took := p.host == nil && len(h.fetches) == 0 && len(h.hints) == 0 && (len(h.background) == 0 || jumps && h.hintRun < hintRunMax) && g.take(h, now, true)
	switch {
	case !took:
		g.park(w, h, hinted)
	case jumps:
		h.hintRun++
	}
	g.mu.Unlock()
	g.schedule(grants, nil)
	return took
}

// park puts w in h's line, or moves it to the hints; g.mu is held.
func (g *Gate) park(w Waiter, h *host, hinted bool) {
	p := w.HostPlace()
	switch {
	case p.host == nil:
		p.host, p.hinted = h, hinted
		if hinted {
			h.hints = append(h.hints, w)
		} else {
			h.background = append(h.background, w)
		}
	case hinted && !p.hinted:
		h.background = remove(h.background, w)
		h.hints = append(h.hints, w)
		p.hinted = true
	}
	if !h.inRing {
		h.inRing = true
		g.ring = append(g.ring, h)
	}
	g.arm(time.Now())
}

// take spends a turn at h when its budget and rate limit allow (and a
// listing slot, for a listing); g.mu is held.
func (g *Gate) take(h *host, now time.Time, listing bool) bool {
	if now.Before(h.until) || h.inFlight >= max(h.budget.InFlight, 1) || (listing && !g.slotFor(h)) {
		return false
	}
	if h.limiter != nil && !h.limiter.AllowN(now, h.cost(listing)) {
		return false
	}
	h.inFlight++
	if listing {
		g.used++
		h.listings++
	}
	return true
}

// slotFor reports whether h may take a listing slot: one is free, and h
// holds fewer than half of them (one at least), so that a slow host
// leaves the other half to the others; g.mu is held.
func (g *Gate) slotFor(h *host) bool {
	return g.used < g.slots && h.listings < max(g.slots/2, 1)
}

// dispatch hands out the turns there are to the waiters in line, one at
// a time to the host in line with the fewest turns in progress (round
// the hosts on a tie), and returns the waiters to schedule; g.mu is held.
func (g *Gate) dispatch(now time.Time) []Waiter {
	var grants []Waiter
	for {
		best := -1
		for i := range len(g.ring) {
			k := (g.next + i) % len(g.ring)
			if h := g.ring[k]; g.ready(h, now) && (best < 0 || h.inFlight < g.ring[best].inFlight) {
				best = k
			}
		}
		if best < 0 {
			break
		}
		g.grantOne(g.ring[best], now, &grants)
		g.next = best + 1
	}
	g.ring = slices.DeleteFunc(g.ring, func(h *host) bool {
		h.inRing = len(h.fetches) > 0 || len(h.hints) > 0 || len(h.background) > 0
		return !h.inRing
	})
	g.arm(now)
	return grants
}

// ready reports whether the first in h's line may have a turn now; g.mu
// is held.
func (g *Gate) ready(h *host, now time.Time) bool {
	fetch := len(h.fetches) > 0
	switch {
	case !fetch && len(h.hints) == 0 && len(h.background) == 0:
		return false
	case now.Before(h.until), h.inFlight >= max(h.budget.InFlight, 1), !fetch && !g.slotFor(h):
		return false
	}
	return h.limiter == nil || h.limiter.TokensAt(now) >= float64(h.cost(!fetch))
}

// cost is the requests of the rate a turn at h spends up front.
func (h *host) cost(listing bool) int {
	if listing && !h.known {
		return 2
	}
	return 1
}

// grantOne hands h's next turn to the first in its line (see ready);
// g.mu is held.
func (g *Gate) grantOne(h *host, now time.Time, grants *[]Waiter) {
	if len(h.fetches) > 0 {
		g.take(h, now, false)
		a := h.fetches[0]
		h.fetches = h.fetches[1:]
		close(a.granted)
		return
	}
	g.take(h, now, true)
	line := &h.background
	if len(h.hints) > 0 && (len(h.background) == 0 || h.hintRun < hintRunMax) {
		line = &h.hints
		h.hintRun++
	} else {
		h.hintRun = 0
	}
	w := (*line)[0]
	*line = (*line)[1:]
	p := w.HostPlace()
	p.host, p.hinted, p.granted = nil, false, h
	*grants = append(*grants, w)
}

// arm sets the timer for the earliest moment a host in line may have a
// turn it has not now: its rate limit's end, or its next token; g.mu is
// held.
func (g *Gate) arm(now time.Time) {
	var at time.Time
	for _, h := range g.ring {
		t := h.readyAt(now)
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if at.IsZero() || g.closed || (!g.wakeAt.IsZero() && !at.Before(g.wakeAt)) {
		return
	}
	g.wakeAt = at
	if g.timer == nil {
		g.timer = time.AfterFunc(at.Sub(now), g.wake)
	} else {
		g.timer.Reset(at.Sub(now))
	}
}

// readyAt is when h, which has someone in line, may next have a turn it
// is kept from now by time alone; zero when nothing but a turn in
// progress keeps it.
func (h *host) readyAt(now time.Time) time.Time {
	if now.Before(h.until) {
		return h.until
	}
	if h.limiter == nil || h.inFlight >= max(h.budget.InFlight, 1) {
		return time.Time{}
	}
	r := h.limiter.ReserveN(now, h.cost(len(h.fetches) == 0))
	d := r.DelayFrom(now)
	r.CancelAt(now)
	if d <= 0 || d == rate.InfDuration {
		return time.Time{}
	}
	return now.Add(d)
}

// wake is the timer's function: turns may be due.
func (g *Gate) wake() {
	g.mu.Lock()
	g.wakeAt = time.Time{}
	grants := g.dispatch(time.Now())
	g.mu.Unlock()
	g.schedule(grants, nil)
}

// schedule schedules the waiters handed a turn, but self, which is in
// its step.
func (g *Gate) schedule(grants []Waiter, self Waiter) {
	for _, w := range grants {
		if w != self {
			g.polls.Schedule(w)
		}
	}
}

// Release ends a turn at host (a listing's, when listing): the next in
// line has it.
func (g *Gate) Release(name string, listing bool) {
	g.mu.Lock()
	g.release(g.hostOf(name), listing)
}

// release is Release with g.mu held, which it unlocks.
func (g *Gate) release(h *host, listing bool) {
	h.inFlight--
	if listing {
		g.used--
		h.listings--
	}
	g.forget()
	grants := g.dispatch(time.Now())
	g.mu.Unlock()
	g.schedule(grants, nil)
}

// Charge spends n more requests of host's rate: what a turn sent past the
// one it was charged (a fetch's advertisement, the git CLI's
// capabilities and listing). The turns after it wait for them.
func (g *Gate) Charge(name string, n int) {
	n = min(n, maxCharge) // what a Mirror says is not trusted
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.hostOf(name)
	if h.limiter == nil || n <= 0 {
		return
	}
	now := time.Now()
	for n > 0 {
		k := min(n, h.limiter.Burst())
		if !h.limiter.ReserveN(now, k).OK() { // kept: a debt the next turns pay
			return
		}
		n -= k
	}
	g.arm(now)
}

// Listed says a listing at host succeeded: its capabilities are known,
// and its next listings cost one request each.
func (g *Gate) Listed(name string) {
	g.mu.Lock()
	g.hostOf(name).known = true
	g.mu.Unlock()
}

// forget drops idle hosts past MaxIdleHosts; g.mu is held.
func (g *Gate) forget() {
	if len(g.hosts) <= max(g.sweep, MaxIdleHosts) {
		return
	}
	defer func() { g.sweep = 2 * len(g.hosts) }() // as many again before the next sweep
	now := time.Now()
	for name, h := range g.hosts {
		idle := h.inFlight == 0 && !h.inRing && !now.Before(h.until) &&
			(h.limiter == nil || h.limiter.TokensAt(now) >= float64(h.limiter.Burst()))
		if idle {
			delete(g.hosts, name)
		}
	}
}

// Leave takes w out of line (it ended), and passes on a turn that was
// handed to it.
func (g *Gate) Leave(w Waiter) {
	g.mu.Lock()
	p := w.HostPlace()
	if h := p.host; h != nil {
		h.hints, h.background = remove(h.hints, w), remove(h.background, w)
		p.host, p.hinted = nil, false
	}
	if h := p.granted; h != nil {
		p.granted = nil
		g.release(h, true)
		return
	}
	g.mu.Unlock()
}

// Acquire waits for a fetch's turn at host (ahead of its listings), or
// for ctx to end. While the host's rate limit holds, it returns the
// answer that set it at once: a fetch does not wait an hour on a worker.
func (g *Gate) Acquire(ctx context.Context, name string) error {
	g.mu.Lock()
	h := g.hostOf(name)
	now := time.Now()
	if now.Before(h.until) {
		err := h.cause
		g.mu.Unlock()
		return err
	}
	if len(h.fetches) == 0 && g.take(h, now, false) {
		g.mu.Unlock()
		return nil
	}
	a := &acquirer{granted: make(chan struct{})}
	h.fetches = append(h.fetches, a)
	if !h.inRing {
		h.inRing = true
		g.ring = append(g.ring, h)
	}
	g.arm(now)
	g.mu.Unlock()
	select {
	case <-a.granted:
		return a.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	select {
	case <-a.granted: // handed over as ctx ended: given back
		g.mu.Unlock()
		if a.err == nil {
			g.Release(name, false)
		}
	default:
		h.fetches = slices.DeleteFunc(h.fetches, func(x *acquirer) bool { return x == a })
		g.mu.Unlock()
	}
	return ctx.Err()
}

// Pause stops every request to host until until (a rate limit), cause
// saying why; fetches waiting for a turn there end with cause. It reports
// whether this begins a pause (none held): the one to log.
func (g *Gate) Pause(name string, until time.Time, cause error) (begins bool) {
	g.mu.Lock()
	h := g.hostOf(name)
	now := time.Now()
	begins = !now.Before(h.until)
	if until.After(h.until) {
		h.until, h.cause = until, cause
	}
	for _, a := range h.fetches {
		a.err = h.cause
		close(a.granted)
	}
	h.fetches = nil
	g.arm(now)
	g.mu.Unlock()
	return begins
}

func remove(line []Waiter, w Waiter) []Waiter {
	return slices.DeleteFunc(line, func(x Waiter) bool { return x == w })
}

// Line is how many wait in host's line: hints, background polls and
// fetches (for tests and debugging).
func (g *Gate) Line(name string) (hints, background, fetches int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, ok := g.hosts[name]
	if !ok {
		return 0, 0, 0
	}
	return len(h.hints), len(h.background), len(h.fetches)
}
