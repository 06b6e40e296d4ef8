package hostgate_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/watcher/internal/hostgate"
	"github.com/modwatch/modwatch/watcher/internal/pool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// world is a gate, its pool, and the turns its waiters took, in order.
type world struct {
	g *hostgate.Gate
	p *pool.Pool

	mu    sync.Mutex
	turns []string // waiter names, in the order they took a turn
	at    []time.Time
}

func newWorld(t *testing.T, slots int, budget func(string) hostgate.Budget) *world {
	p := pool.New(t.Context(), 4)
	w := &world{p: p, g: hostgate.New(slots, p, budget)}
	t.Cleanup(func() { w.g.Close(); p.Close() })
	return w
}

// waiter asks for a listing turn at its host on each step, and holds it
// (in flight) until released.
type waiter struct {
	w      *world
	name   string
	host   string
	hinted bool
	slot   pool.Slot
	place  hostgate.Place
	held   bool
}

func (x *waiter) Slot() *pool.Slot           { return &x.slot }
func (x *waiter) HostPlace() *hostgate.Place { return &x.place }
func (x *waiter) Finish()                    { x.w.g.Leave(x) }
func (x *waiter) Step(context.Context) bool  { x.try(); return false }

func (x *waiter) try() {
	x.w.mu.Lock()
	defer x.w.mu.Unlock()
	if x.held || !x.w.g.TryOrPark(x, x.host, x.hinted) {
		return
	}
	x.held = true
	x.w.turns = append(x.w.turns, x.name)
	x.w.at = append(x.w.at, time.Now())
}

// drop ends x's turn, if it holds one.
func (x *waiter) drop() {
	x.w.mu.Lock()
	held := x.held
	x.held = false
	x.w.mu.Unlock()
	if held {
		x.w.g.Release(x.host, true)
	}
}

func (w *world) start(name, host string, hinted bool) *waiter {
	x := &waiter{w: w, name: name, host: host, hinted: hinted}
	w.p.Start(x)
	synctest.Wait() // its first step done: waiters queue in the order they start
	return x
}

func (w *world) taken() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.turns...)
}

func budgetOf(b hostgate.Budget) func(string) hostgate.Budget {
	return func(string) hostgate.Budget { return b }
}

// A host holds no more turns than its budget's InFlight, nor more than
// half the listing slots, and a host with a long line does not take the
// slots another host's waiter needs: the hosts take turns.
func TestHostsTakeTurnsAtTheSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 6, budgetOf(hostgate.Budget{InFlight: 2}))
		var slow []*waiter
		for i := range 10 {
			slow = append(slow, w.start(fmt.Sprint("slow", i), "slow.example", false))
		}
		assert.Equal(t, []string{"slow0", "slow1"}, w.taken(), "the host's budget: two in flight")
		calm := w.start("calm", "calm.example", false)
		w.start("calm2", "calm.example", false)
		w.start("calm3", "calm.example", false)
		w.start("more", "more.example", false)
		w.start("more2", "more.example", false)
		assert.Equal(t, []string{"slow0", "slow1", "calm", "calm2", "more", "more2"}, w.taken(), "other hosts have turns at once")

		// With every slot taken, a freed one goes to the host in line
		// with the fewest turns in progress: not back to the slow one.
		w.start("third", "third.example", false)
		slow[0].drop()
		synctest.Wait()
		calm.drop()
		synctest.Wait()
		assert.Equal(t, []string{"third", "calm3"}, w.taken()[6:])
		slow[1].drop()
		synctest.Wait()
		assert.Equal(t, []string{"slow2"}, w.taken()[8:], "slow2 takes the freed slot")
	})
}

// With every host's budget larger than the slots, a host still takes no
// more than half of them: a slow host leaves the other half.
func TestAHostTakesHalfTheSlotsAtMost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 4, budgetOf(hostgate.Budget{InFlight: 100}))
		for i := range 10 {
			w.start(fmt.Sprint("slow", i), "slow.example", false)
		}
		assert.Equal(t, []string{"slow0", "slow1"}, w.taken())
		w.start("calm", "calm.example", false)
		assert.Equal(t, []string{"slow0", "slow1", "calm"}, w.taken())
		one := newWorld(t, 1, budgetOf(hostgate.Budget{InFlight: 100}))
		one.start("a", "h", false)
		assert.Equal(t, []string{"a"}, one.taken(), "one slot: one host may take it")
	})
}

// Until a listing at a host succeeded, each costs two requests of its
// rate (the host's capabilities, then the listing); then one.
func TestFirstListingsCostTheCapabilitiesToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 16, budgetOf(hostgate.Budget{PerSecond: 2, Burst: 2, InFlight: 16}))
		for i := range 3 {
			w.start(fmt.Sprint(i), "h", false)
		}
		assert.Len(t, w.taken(), 1, "a burst of two: one first listing")
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Len(t, w.taken(), 2)
		w.g.Listed("h")
		w.start("3", "h", false)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Len(t, w.taken(), 4, "two a second once the host is known")
	})
}

// A storm of hints does not stop a host's background polls: every fifth
// turn goes to one.
func TestAHintStormLeavesTurnsToTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 16, budgetOf(hostgate.Budget{InFlight: 1}))
		first := w.start("first", "h", false)
		w.start("bg", "h", false)
		var hints []*waiter
		for i := range 10 {
			hints = append(hints, w.start(fmt.Sprint("hint", i), "h", true))
		}
		first.drop()
		synctest.Wait()
		for i := range 5 {
			hints[i].drop()
			synctest.Wait()
		}
		assert.Equal(t, []string{"first", "hint0", "hint1", "hint2", "hint3", "bg"}, w.taken())
	})
}

// In a host's line, a hint goes before the background polls, even one
// parked before it was hinted.
func TestHintsGoFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 16, budgetOf(hostgate.Budget{InFlight: 1}))
		for i := range 5 {
			w.start(fmt.Sprint("bg", i), "h", false)
			synctest.Wait()
		}
		late := w.start("late", "h", false)
		synctest.Wait()
		w.start("hint", "h", true)
		w.mu.Lock()
		late.hinted = true
		w.mu.Unlock()
		w.p.Schedule(late) // hinted while in line
		synctest.Wait()
		w.g.Release("h", true)
		synctest.Wait()
		w.g.Release("h", true)
		synctest.Wait()
		assert.Equal(t, []string{"bg0", "hint", "late"}, w.taken())
	})
}

// A host's rate is never exceeded: a hundred waiters at 10 a second
// take their turns 100 ms apart, and the line ends at the rate's lower
// bound.
func TestTheRateIsNeverExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 16, budgetOf(hostgate.Budget{PerSecond: 10, Burst: 1, InFlight: 4}))
		w.g.Listed("h")
		start := time.Now()
		var all []*waiter
		for i := range 100 {
			all = append(all, w.start(fmt.Sprint(i), "h", false))
		}
		for len(w.taken()) < 100 {
			synctest.Wait()
			for _, x := range all {
				x.drop()
			}
			time.Sleep(10 * time.Millisecond)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		// A burst of two (a fetch's cost), then one each 100 ms.
		for i := 2; i < len(w.at); i++ {
			require.GreaterOrEqual(t, w.at[i].Sub(w.at[0]), time.Duration(i-1)*100*time.Millisecond, "turn %d", i)
		}
		assert.Less(t, w.at[len(w.at)-1].Sub(start), 10*time.Second+200*time.Millisecond)
	})
}

// A rate limit stops every turn at its host, hints and fetches
// included, until its end; the other hosts go on. A fetch asking during
// it is told why at once.
func TestAPauseStopsTheHostOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 16, budgetOf(hostgate.Budget{InFlight: 8}))
		cause := errors.New("rate limited")
		until := time.Now().Add(20 * time.Second)
		assert.True(t, w.g.Pause("h", until, cause), "a pause begins")
		assert.False(t, w.g.Pause("h", until.Add(-time.Second), cause), "the same episode")
		w.start("bg", "h", false)
		w.start("hint", "h", true)
		w.start("other", "o", false)
		synctest.Wait()
		assert.Equal(t, []string{"other"}, w.taken())
		assert.ErrorIs(t, w.g.Acquire(t.Context(), "h"), cause)

		time.Sleep(19 * time.Second)
		synctest.Wait()
		assert.Equal(t, []string{"other"}, w.taken(), "nothing before the end")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, []string{"other", "hint", "bg"}, w.taken(), "after it, the hint first")
		require.NoError(t, w.g.Acquire(t.Context(), "h"), "a fetch has its turn again")
		w.g.Release("h", false)
	})
}

// A turn handed to a waiter that has not taken it when a rate limit
// begins goes back: the waiter waits for the end in line.
func TestATurnHandedOverBeforeAPauseIsNotTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 16, budgetOf(hostgate.Budget{InFlight: 1}))
		first := w.start("first", "h", false)
		synctest.Wait()
		second := &waiter{w: w, name: "second", host: "h"}
		w.p.Start(second)
		synctest.Wait()
		// Release hands second the turn; it is paused before its step.
		w.g.Pause("h", time.Now().Add(time.Minute), errors.New("limited"))
		first.drop()
		synctest.Wait()
		assert.Equal(t, []string{"first"}, w.taken())
		time.Sleep(61 * time.Second)
		synctest.Wait()
		assert.Equal(t, []string{"first", "second"}, w.taken())
	})
}

// Fetches go before the listings in line, and a fetch that gives up
// leaves no turn taken.
func TestFetchesGoFirstAndGiveUpCleanly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 16, budgetOf(hostgate.Budget{InFlight: 1}))
		w.start("list", "h", false)
		synctest.Wait()
		w.start("list2", "h", false)
		synctest.Wait()
		fetched := make(chan error, 1)
		go func() { fetched <- w.g.Acquire(context.Background(), "h") }()
		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := make(chan error, 1)
		go func() { gaveUp <- w.g.Acquire(ctx, "h") }()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-gaveUp, context.Canceled)
		w.g.Release("h", true)
		require.NoError(t, <-fetched)
		synctest.Wait()
		assert.Equal(t, []string{"list"}, w.taken(), "the fetch went first")
		w.g.Release("h", false)
		synctest.Wait()
		assert.Equal(t, []string{"list", "list2"}, w.taken())
	})
}

// A waiter that ends while it holds a turn handed to it gives it back.
func TestLeavingGivesTheTurnBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 1, budgetOf(hostgate.Budget{InFlight: 4}))
		w.start("a", "h", false)
		synctest.Wait()
		b := &waiter{w: w, name: "b", host: "h"}
		w.p.Start(b)
		synctest.Wait()
		w.g.Leave(b) // out of line, before any turn
		w.start("c", "h", false)
		synctest.Wait()
		w.g.Release("h", true)
		synctest.Wait()
		assert.Equal(t, []string{"a", "c"}, w.taken())
	})
}

// What a turn sent past its own request is charged after it: the next
// turns at the host wait for it.
func TestChargedRequestsDelayTheNextTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 16, budgetOf(hostgate.Budget{PerSecond: 10, Burst: 2, InFlight: 4}))
		w.g.Listed("h")
		require.NoError(t, w.g.Acquire(t.Context(), "h"))
		start := time.Now()
		w.g.Charge("h", 5) // a fetch of six requests
		w.g.Release("h", false)
		w.start("next", "h", false)
		for len(w.taken()) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		// A burst of two: one spent by the turn, one of the five charged;
		// the other four at 10 a second, then the next turn's own.
		assert.GreaterOrEqual(t, w.at[0].Sub(start), 500*time.Millisecond)
		w.g.Charge("elsewhere", 3) // a host with no rate: nothing to charge
	})
}
