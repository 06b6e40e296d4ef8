// Command polite measures a watcher's requests to one host under a budget
// (P15, issue "polite at internet scale"): -remotes repositories of one
// commit on one git server on loopback (one host), a target each, and a
// watcher with a budget of -rate requests a second for every host, burst
// 2 (watcher.WithHostBudget). It measures the start-up, from Run to every
// target delivered: the most requests the server received in any second,
// against the budget, and the wall time, against the least the budget
// allows (the requests the server received, less the burst, / the rate),
// and how long listings and fetches waited for their turn. The same
// start-up with no budget (the default: requests in flight bounded, no
// rate) stands beside it for reference.
//
//	go run ./internal/dev/bench/polite -out bench-results/polite.md
//	go run ./internal/dev/bench/polite -remotes 300 -rate 20
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/internal/dev/bench/harness"
	"github.com/modwatch/modwatch/internal/dev/bench/quantile"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/watcher"
)

// burst is the budget's burst: the least a budget with a rate takes
// (a host's first listings cost two).
const burst = 2

type config struct {
	remotes int
	rate    float64
	timeout time.Duration
	out     string
}

func main() {
	var c config
	flag.IntVar(&c.remotes, "remotes", 1000, "remotes on the one host, one commit and one target each")
	flag.Float64Var(&c.rate, "rate", 25, "the budget: requests a second to the host (burst 2); this machine's loopback server answers about 30 a second")
	flag.DurationVar(&c.timeout, "timeout", 0, "how long each start-up may take (0: three times the budget's least, plus two minutes)")
	flag.StringVar(&c.out, "out", "", "also write the table to this file")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "polite:", err)
		os.Exit(1)
	}
}

func run(c config) (err error) {
	if c.remotes < 1 || c.rate <= 0 {
		return fmt.Errorf("-remotes %d, -rate %v: want at least one remote and a rate above 0", c.remotes, c.rate)
	}
	if c.timeout <= 0 {
		// A listing and a fetch a remote, and a capability advertisement.
		least := time.Duration(float64(2*c.remotes+1) / c.rate * float64(time.Second))
		c.timeout = 3*least + 2*time.Minute
	}
	env := &gittest.Standalone{}
	defer env.Close()
	defer env.Recover(&err)
	srv, targets := serve(env, c.remotes)
	logf("%d remotes on %s; start-up with a budget of %g/s, burst %d", c.remotes, srv.URL(), c.rate, burst)
	polite, err := startUp(env, srv, targets, c.timeout, watcher.WithHostBudget("", watcher.HostBudget{PerSecond: c.rate, Burst: burst}))
	if err != nil {
		return fmt.Errorf("with a budget: %w", err)
	}
	logf("with a budget: %s; start-up with no budget", polite.wall.Round(time.Millisecond))
	free, err := startUp(env, srv, targets, c.timeout)
	if err != nil {
		return fmt.Errorf("with no budget: %w", err)
	}
	logf("with no budget: %s", free.wall.Round(time.Millisecond))
	return harness.PrintTable(rows(c, polite, free), c.out)
}

func logf(format string, a ...any) { fmt.Fprintf(os.Stderr, "polite: "+format+"\n", a...) }

// serve makes n repositories of one commit on one server, forks of one
// (forks run no git), and a target for each.
func serve(env *gittest.Standalone, n int) (*gittest.Server, []watcher.Target) {
	srv := gittest.NewServer(env)
	template := srv.NewRepo(env, "polite/template")
	template.Commit(env, "init", gittest.File("app/cm.yaml", "v1"))
	targets := make([]watcher.Target, n)
	for i := range targets {
		r := template.Fork(env, fmt.Sprintf("polite/r%04d", i))
		targets[i] = watcher.Target{ID: fmt.Sprintf("r%04d", i), URL: r.URL()}
	}
	return srv, targets
}

// measured is what one start-up was.
type measured struct {
	wall time.Duration
	// reqs are the requests the server received in it.
	reqs []gittest.Request
	// waited are the listings' and fetches' waits for their turn at the
	// host (Event.Waited).
	waited []time.Duration
}

func (m measured) maxPerSecond() int { return gittest.MaxPerSecond(m.reqs, time.Second) }

// busiest is the most requests received in any second, and that count
// without the capability advertisements (which open a host's first
// listings).
func (m measured) busiest() string {
	var rest []gittest.Request
	for _, r := range m.reqs {
		if r.Kind != "caps" {
			rest = append(rest, r)
		}
	}
	return fmt.Sprintf("%d (%d without the capability advertisements)", m.maxPerSecond(), gittest.MaxPerSecond(rest, time.Second))
}

// kinds says how many requests of each kind the start-up made, and how
// many were not answered 200.
func (m measured) kinds() string {
	byKind, failed := map[string]int{}, 0
	for _, r := range m.reqs {
		byKind[r.Kind]++
		if r.Status != http.StatusOK {
			failed++
		}
	}
	s := fmt.Sprintf("%d requests: %d listings, %d fetches, %d capability advertisements", len(m.reqs), byKind["list"], byKind["fetch"], byKind["caps"])
	if byKind["other"] > 0 {
		s += fmt.Sprintf(", %d others", byKind["other"])
	}
	if failed > 0 {
		s += fmt.Sprintf("; %d not answered 200", failed)
	}
	return s
}

// startUp runs a watcher of targets with opts, cold (a cache directory of
// its own), until each target is delivered, and stops it.
func startUp(env *gittest.Standalone, srv *gittest.Server, targets []watcher.Target, timeout time.Duration, opts ...watcher.Option) (measured, error) {
	var m measured
	var mu sync.Mutex
	obs := watcher.ObserverFunc(func(e watcher.Event) {
		if e.Type == watcher.EventListed || e.Type == watcher.EventFetched {
			mu.Lock()
			m.waited = append(m.waited, e.Waited)
			mu.Unlock()
		}
	})
	sink := newSink(len(targets))
	opts = append([]watcher.Option{watcher.WithCacheDir(env.TempDir()), watcher.WithInterval(time.Hour), watcher.WithObserver(obs)}, opts...)
	w := watcher.New(opts...)
	if err := w.Route(static.New(targets...), watcher.Named("record", sink)); err != nil {
		return m, err
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), logr.Discard()))
	defer cancel()
	errc := make(chan error, 1)
	t0 := time.Now()
	go func() { errc <- w.Run(ctx) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-sink.all:
	case err := <-errc:
		return m, fmt.Errorf("the watcher stopped at %d of %d targets delivered: %v", sink.count(), len(targets), err)
	case <-timer.C:
		cancel()
		return m, errors.Join(fmt.Errorf("timed out after %s: %d of %d targets delivered", timeout, sink.count(), len(targets)), <-errc)
	}
	m.wall = time.Since(t0)
	end := t0.Add(m.wall)
	cancel()
	if err := <-errc; err != nil {
		return m, err
	}
	for _, r := range srv.Requests() {
		if !r.Time.Before(t0) && !r.Time.After(end) {
			m.reqs = append(m.reqs, r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return m, nil
}

// sink records the targets delivered; all is closed when each of n was.
type sink struct {
	n   int
	all chan struct{}

	mu   sync.Mutex
	seen map[string]bool
}

func newSink(n int) *sink { return &sink{n: n, all: make(chan struct{}), seen: map[string]bool{}} }

func (s *sink) Deliver(_ context.Context, c watcher.Change) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.seen[c.Target.ID] {
		s.seen[c.Target.ID] = true
		if len(s.seen) == s.n {
			close(s.all)
		}
	}
	return nil
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// rows are the table: the budgeted start-up's most requests in a second
// against the budget, its wall time against the least the budget allows,
// the start-up with no budget beside, and the waits for a turn.
func rows(c config, polite, free measured) []harness.Row {
	// The first burst requests go at once, the rest one every 1/rate.
	requests := len(polite.reqs)
	least := time.Duration(float64(max(requests-burst, 0)) / c.rate * float64(time.Second))
	wait := func(m measured) string {
		if len(m.waited) == 0 {
			return "none reported"
		}
		return fmt.Sprintf("%s / %s", quantile.Of(m.waited, 0.5).Round(time.Millisecond), quantile.Of(m.waited, 1).Round(time.Millisecond))
	}
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return []harness.Row{
		harness.NewRow("P15", fmt.Sprintf("most requests received in any 1 s, start-up of %d remotes on one host, budget %g/s burst %d", c.remotes, c.rate, burst),
			polite.busiest(), fmt.Sprintf("%g (the budget)", c.rate),
			fmt.Sprintf("%.2f", float64(polite.maxPerSecond())/c.rate), fmt.Sprintf("≤ %g (budget + burst)", c.rate+burst)),
		harness.NewRow("P15", fmt.Sprintf("start-up, Run to every target delivered, budget %g/s (%s)", c.rate, polite.kinds()),
			ms(polite.wall), fmt.Sprintf("%s (the least the budget allows: %d requests, the first %d at once, the rest at %g per s)", ms(least), requests, burst, c.rate),
			fmt.Sprintf("%.2f", float64(polite.wall)/float64(least)), "≤ 1.2"),
		harness.NewRow("P15", fmt.Sprintf("the same start-up with no budget (the default: %d in flight, no rate), for reference: wall / most requests in any 1 s (%s)",
			watcher.DefaultHostInFlight, free.kinds()),
			fmt.Sprintf("%s / %s", ms(free.wall), free.busiest()), fmt.Sprintf("%g (the budget above)", c.rate),
			fmt.Sprintf("%.2f", float64(free.maxPerSecond())/c.rate), "reference"),
		harness.NewRow("P15", "a listing's or fetch's wait for its turn at the host (Event.Waited): median / max, with the budget",
			wait(polite), wait(free)+" (no budget)", "", ""),
	}
}
