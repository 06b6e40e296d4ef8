// Command fleet measures what a watcher of many targets costs at steady
// state (P10): 1,000 targets on 50 remotes of the real git server on
// loopback, every target delivered once, then no-change polls, then 35s
// with none (-settle: a mirror empties its object cache when idle). The watcher
// runs in a process of its own, which reports its resident memory, heap
// and goroutines; the baseline is the same process watching nothing. Its
// start-up (every mirror cold, to every target delivered) is measured
// against git clone --bare of the same remotes at the watcher's fetch
// concurrency. With -replicas n, n more processes each watch every target
// and own 1/n of the remotes (a fixed split, as a Lease shard's is at
// rest), one after the other, beside the one-replica figure, and one more
// that watches every target and owns none: the part of a replica's cost no
// number of replicas divides, which each replica's figure is also given
// net of. With -curve,
// only the no-change cycle's client CPU per remote, at several numbers of
// remotes, each measured -rounds times.
//
//	go run ./internal/dev/bench/fleet -out bench-results/fleet.md
//	go run ./internal/dev/bench/fleet -curve 1000,10000 -per-remote 10
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/bench/harness"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/watcher"
)

// fetches is the watcher's fetch concurrency (its default), and the
// baseline's clones at once.
const fetches = 4

// report is what the child says of itself at steady state.
type report struct {
	RSS, HWM, Heap int64
	// Live is the heap the last collection found live (runtime/metrics'
	// /gc/heap/live:bytes): Heap less what its spans hold free.
	Live int64
	// Objects is how many objects the last collection found live
	// (/gc/heap/objects:objects, read just after it): what a collection
	// marks, one by one.
	Objects int64
	// Returned is the RSS after the runtime returned the memory it holds
	// free to the system (debug.FreeOSMemory): what the process keeps,
	// without what a peak left behind that the scavenger returns slowly.
	Returned   int64
	Goroutines int
	Delivered  int64
	// CycleWall and CycleCPU are a no-change cycle's wall time and the
	// process's CPU time (user and system) in it, the mean of Cycles
	// cycles, which held CycleGCs collections.
	// CycleGC is the runtime's estimate of its collector's time
	// (/cpu/classes/gc/total:cpu-seconds), and CycleGCIdle the part of
	// that its idle-priority mark workers took
	// (/cpu/classes/gc/mark/idle:cpu-seconds). The runtime counts the
	// time its workers held a P, not the CPU the system gave them: with
	// other processes busy on the cores (the loopback server's), it can
	// be several times what a CPU profile of the cycles samples in the
	// workers, and it is not a part of CycleCPU.
	CycleWall, CycleCPU, CycleGC, CycleGCIdle time.Duration
	Cycles, CycleGCs                          int
	// CycleAlloc is what the cycles allocated (the runtime's count of
	// bytes), per poll.
	CycleAlloc int64
	// StartUp is the time from Run to every target delivered, every
	// mirror cold, and StartCPU the process's CPU time in it.
	StartUp, StartCPU time.Duration
	// Fetches is the watcher's fetch concurrency.
	Fetches int
}

// The no-change cycles measured make pollsMeasured polls together at
// least, whatever the remotes, and hold minGCs collections at least;
// maxCycles at most.
const (
	pollsMeasured = 20000
	minGCs        = 3
	maxCycles     = 200
)

// collectionsWanted is minGCs, or none when the collector is off
// (GOGC=off), which never starts one: then the cycles hold no
// collection, and the heap grows by all they allocate instead.
func collectionsWanted() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	if p < 0 {
		return 0
	}
	return minGCs
}

// gcsSince is how many collections the runtime completed since the
// count was from.
func gcsSince(from uint32) int {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int(ms.NumGC - from)
}

// Set by flags, the same in the parent and its children.
var (
	timeout = flag.Duration("timeout", 5*time.Minute, "how long a watcher may take to deliver every target, and then to poll every remote")
	clones  = flag.Bool("clones", true, "measure the baseline of the start-up row, a git clone --bare of every remote (-clones=false: leave that row out)")
)

func main() {
	child := flag.Bool("child", false, "internal: run the watcher of the targets read from stdin")
	heap := flag.String("heap", "", "with -child: write a heap profile here at steady state")
	cpuProfile := flag.String("cpu", "", "with -child: write a CPU profile of the no-change cycles here")
	settle := flag.Duration("settle", 35*time.Second, "how long after the last poll steady state is measured (a mirror's object cache empties after 30s without reads)")
	remotes := flag.Int("remotes", 50, "remotes")
	perRemote := flag.Int("per-remote", 20, "targets per remote")
	out := flag.String("out", "", "also write the table to this file")
	replicas := flag.Int("replicas", 1, "also measure the targets shared by this many replicas, each in a process of its own, one after the other")
	shard := flag.String("shard", "", "with -child: the replica i/n of a shared watcher, or none: a replica that owns no remote")
	curve := flag.String("curve", "", "instead: the no-change cycle's client CPU per remote at each of these numbers of remotes (1000,10000), in -rounds rounds")
	rounds := flag.Int("rounds", 3, "with -curve: how many times each size is measured")
	flag.Parse()
	err := unusedFlags(*curve != "")
	switch {
	case err != nil:
	case *child:
		err = runChild(*heap, *cpuProfile, *shard, *settle)
	case *curve != "":
		err = runCurve(*curve, *rounds, *perRemote, *settle, *out)
	default:
		err = run(*remotes, *perRemote, *replicas, *settle, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// unusedFlags refuses a flag the chosen measurement would ignore: -remotes,
// -replicas and -clones with -curve, -rounds without it.
func unusedFlags(curve bool) error {
	var err error
	flag.Visit(func(f *flag.Flag) {
		switch {
		case curve && (f.Name == "remotes" || f.Name == "replicas" || f.Name == "clones"):
			err = fmt.Errorf("-%s has no use with -curve, which measures the sizes it names without clones or replicas", f.Name)
		case !curve && f.Name == "rounds":
			err = errors.New("-rounds has no use without -curve")
		}
	})
	return err
}

func run(remotes, perRemote, replicas int, settle time.Duration, out string) (err error) {
	env := &gittest.Standalone{}
	defer env.Close()
	defer env.Recover(&err)
	targets := serve(env, remotes, perRemote)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	empty, err := measure(self, nil, "", "", "", settle)
	if err != nil {
		return err
	}
	full, err := measure(self, targets, os.Getenv("FLEET_HEAP"), os.Getenv("FLEET_CPU"), "", settle)
	if err != nil {
		return err
	}
	var cloned time.Duration
	if *clones {
		if cloned, err = cloneAll(targets, full.Fetches); err != nil {
			return err
		}
	}
	var shared []report
	var none report // a replica holding every target, owning no remote
	if replicas > 1 {
		if none, err = measure(self, targets, "", "", "none", settle); err != nil {
			return err
		}
		var delivered int64
		for i := range replicas {
			heap := ""
			if h := os.Getenv("FLEET_HEAP"); h != "" {
				heap = fmt.Sprintf("%s.r%d", h, i)
			}
			r, err := measure(self, targets, heap, "", fmt.Sprintf("%d/%d", i, replicas), settle)
			if err != nil {
				return err
			}
			delivered += r.Delivered
			shared = append(shared, r)
		}
		if delivered != int64(len(targets)) {
			return fmt.Errorf("%d replicas delivered %d of %d targets", replicas, delivered, len(targets))
		}
	}
	n := int64(len(targets))
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	kib := func(b int64) string { return fmt.Sprintf("%.1f KiB", float64(b)/1024) }
	rows := []harness.Row{
		harness.NewRow("P10", fmt.Sprintf("RSS at steady state, %d targets on %d remotes", n, remotes), mib(full.RSS), mib(empty.RSS)+" (the same process, no targets)",
			fmt.Sprintf("%.2f", float64(full.RSS)/float64(empty.RSS)), "≤ 100 MiB"),
		harness.NewRow("P10", "RSS per target above the empty process", kib((full.RSS-empty.RSS)/n), "", "", ""),
		harness.NewRow("P10", "heap in use at steady state / per target / live / live objects per target", mib(full.Heap)+" / "+kib((full.Heap-empty.Heap)/n)+" / "+mib(full.Live)+" / "+fmt.Sprintf("%.1f", float64(full.Objects-empty.Objects)/float64(n)),
			mib(empty.Heap)+" / "+mib(empty.Live)+" / "+fmt.Sprint(empty.Objects)+" objects", "", ""),
		harness.NewRow("P10", "goroutines / per target", fmt.Sprintf("%d / %.2f", full.Goroutines, float64(full.Goroutines-empty.Goroutines)/float64(n)), fmt.Sprint(empty.Goroutines), "", ""),
		harness.NewRow("P10", "peak RSS", mib(full.HWM), mib(empty.HWM), fmt.Sprintf("%.2f", float64(full.HWM)/float64(empty.HWM)), ""),
		harness.NewRow("P10", "RSS with free memory returned (debug.FreeOSMemory)", mib(full.Returned), mib(empty.Returned), fmt.Sprintf("%.2f", float64(full.Returned)/float64(empty.Returned)), ""),
		harness.NewRow("P10", fmt.Sprintf("no-change cycle (every remote listed; the mean of %d, which held %d collections): wall / client CPU / client CPU per remote (the collector's time by the runtime's estimate, of it idle-priority) / allocated per poll", full.Cycles, full.CycleGCs),
			fmt.Sprintf("%s / %s / %s (%s, %s) / %.1f KB", full.CycleWall.Round(time.Millisecond), full.CycleCPU.Round(time.Millisecond), eachOf(full.CycleCPU, remotes),
				eachOf(full.CycleGC, remotes), eachOf(full.CycleGCIdle, remotes), float64(full.CycleAlloc)/1000), "", "", ""),
	}
	if *clones {
		rows = append(rows, harness.NewRow("P10", fmt.Sprintf("start-up: %d cold remotes to every target delivered (the watcher's CPU: %s)", remotes, full.StartCPU.Round(time.Millisecond)), full.StartUp.Round(time.Millisecond).String(),
			fmt.Sprintf("%s (git clone --bare of each, %d at a time, as the watcher's fetches)", cloned.Round(time.Millisecond), full.Fetches),
			fmt.Sprintf("%.2f", float64(full.StartUp)/float64(cloned)), "≤ 1.0"))
	}
	if len(shared) > 0 {
		rows = append(rows, harness.NewRow("P10", fmt.Sprintf("a replica that holds all %d targets and owns no remote (what no number of replicas divides): heap in use %s, live %s; RSS with free memory returned %s",
			n, mib(none.Heap), mib(none.Live), mib(none.Returned)), mib(none.RSS), mib(full.RSS)+" (one replica, same run)", fmt.Sprintf("%.2f", float64(none.RSS)/float64(full.RSS)), ""))
	}
	// net is a replica's share of what the replicas divide: its figure and
	// the one replica's, each less the replica that owns no remote.
	net := func(r, one, none int64) string { return fmt.Sprintf("%.2f", float64(r-none)/float64(one-none)) }
	for i, r := range shared {
		rows = append(rows, harness.NewRow("P10", fmt.Sprintf("replica %d of %d: RSS at steady state, its %d targets delivered (all %d watched); heap in use %s, live %s (one replica %s, %.2f); RSS with free memory returned %s (one replica %s, %.2f); net of the replica owning none: RSS %s, live %s, returned %s",
			i+1, len(shared), r.Delivered, n, mib(r.Heap), mib(r.Live), mib(full.Live), float64(r.Live)/float64(full.Live), mib(r.Returned), mib(full.Returned), float64(r.Returned)/float64(full.Returned),
			net(r.RSS, full.RSS, none.RSS), net(r.Live, full.Live, none.Live), net(r.Returned, full.Returned, none.Returned)),
			mib(r.RSS), mib(full.RSS)+" (one replica, same run)", fmt.Sprintf("%.2f", float64(r.RSS)/float64(full.RSS)), "≤ 0.40"))
	}
	return harness.PrintTable(rows, out)
}

// serve makes remotes repositories on a git server of env, perRemote
// targets each, one directory of the repository a target.
func serve(env *gittest.Standalone, remotes, perRemote int) []watcher.Target {
	srv := gittest.NewServer(env)
	// Every remote is a fork of one: the same files, each a repository of
	// its own on the server (forks run no git: 10,000 took about a minute).
	template := srv.NewRepo(env, "fleet/template")
	var files []gittest.Change
	for j := range perRemote {
		files = append(files, gittest.File(fmt.Sprintf("app%02d/cm.yaml", j), "v1"))
	}
	template.Commit(env, "init", files...)
	var targets []watcher.Target
	for i := range remotes {
		r := template.Fork(env, fmt.Sprintf("fleet/r%03d", i))
		for j := range perRemote {
			targets = append(targets, watcher.Target{ID: fmt.Sprintf("r%03d/app%02d", i, j), URL: r.URL(), Path: fmt.Sprintf("app%02d", j)})
		}
	}
	return targets
}

// runCurve measures the no-change cycle's client CPU per remote at each
// size of sizes (numbers of remotes, the smallest the baseline), each in
// a process of its own, rounds times: the sizes one after the other,
// in turn forwards and backwards, so that a drift of the machine weighs
// on each alike. The remotes of a smaller size are the first of the
// larger's, on one server.
func runCurve(sizes string, rounds, perRemote int, settle time.Duration, out string) (err error) {
	var ns []int
	for f := range strings.SplitSeq(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("-curve %q: want numbers of remotes apart by commas", sizes)
		}
		ns = append(ns, n)
	}
	slices.Sort(ns)
	if rounds < 1 {
		return fmt.Errorf("-rounds %d: want 1 or more", rounds)
	}
	env := &gittest.Standalone{}
	defer env.Close()
	defer env.Recover(&err)
	targets := serve(env, ns[len(ns)-1], perRemote)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	got := make([][]report, len(ns))
	for r := range rounds {
		for k := range ns {
			i := k
			if r%2 == 1 {
				i = len(ns) - 1 - k
			}
			rep, err := measure(self, targets[:ns[i]*perRemote], "", "", "", settle)
			if err != nil {
				return err
			}
			got[i] = append(got[i], rep)
		}
	}
	return harness.PrintTable(curveRows(ns, perRemote, got), out)
}

// curveRows are runCurve's rows: each size's figures of each round, their
// median, and its ratio to the smallest size's.
func curveRows(ns []int, perRemote int, got [][]report) []harness.Row {
	perRemoteCPU := func(rs []report, n int) (all []time.Duration, median time.Duration) {
		for _, r := range rs {
			all = append(all, eachOf(r.CycleCPU, n))
		}
		sorted := slices.Sorted(slices.Values(all))
		return all, (sorted[(len(sorted)-1)/2] + sorted[len(sorted)/2]) / 2
	}
	_, base := perRemoteCPU(got[0], ns[0])
	var rows []harness.Row
	for i, n := range ns {
		all, median := perRemoteCPU(got[i], n)
		var figures, gcs, allocs, objects []string
		for j, d := range all {
			r := got[i][j]
			figures = append(figures, d.String())
			gcs = append(gcs, fmt.Sprintf("%s (idle %s; %d collections in %d cycles)", eachOf(r.CycleGC, n), eachOf(r.CycleGCIdle, n), r.CycleGCs, r.Cycles))
			allocs = append(allocs, fmt.Sprintf("%.1f", float64(r.CycleAlloc)/1000))
			objects = append(objects, fmt.Sprintf("%.1f", float64(r.Objects)/float64(n*perRemote)))
		}
		what := fmt.Sprintf("no-change cycle, client CPU per remote: %d remotes (%d targets), %d rounds (the collector's time by the runtime's estimate: %s; allocated per poll: %s KB; live objects per target: %s)",
			n, n*perRemote, len(all), strings.Join(gcs, ", "), strings.Join(allocs, ", "), strings.Join(objects, ", "))
		baseline, ratio, goal := "", "", ""
		if i > 0 {
			baseline = fmt.Sprintf("%s (the median at %d remotes)", base, ns[0])
			ratio, goal = fmt.Sprintf("%.2f", float64(median)/float64(base)), "flat"
		}
		rows = append(rows, harness.NewRow("P10", what, fmt.Sprintf("%s (median %s)", strings.Join(figures, ", "), median), baseline, ratio, goal))
	}
	return rows
}

// measure runs a child watching targets and reads its report.
func measure(self string, targets []watcher.Target, heap, cpuProfile, shard string, settle time.Duration) (report, error) {
	var r report
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	if err := enc.Encode(len(targets)); err != nil {
		return r, err
	}
	for _, t := range targets {
		if err := enc.Encode(t); err != nil {
			return r, err
		}
	}
	cmd := exec.Command(self, "-child", "-heap", heap, "-cpu", cpuProfile, "-shard", shard, "-settle", settle.String(), "-timeout", timeout.String())
	cmd.Stdin = &in
	cmd.Stderr = os.Stderr
	outp, err := cmd.Output()
	if err != nil {
		return r, fmt.Errorf("child: %w", err)
	}
	if err := json.Unmarshal(outp, &r); err != nil {
		return r, fmt.Errorf("child said %q: %w", outp, err)
	}
	if r.Delivered != int64(len(targets)) && shard == "" {
		return r, fmt.Errorf("child delivered %d of %d targets", r.Delivered, len(targets))
	}
	return r, nil
}

// maxTargets bounds the count a child is told to read.
const maxTargets = 10_000_000

// readTargets reads what measure writes: the number of targets, then each
// target, one JSON value a line, into a list made at its size (decoding
// one array would hold the whole text and grow the list by doubling).
func readTargets(r io.Reader) ([]watcher.Target, error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	var n int
	if err := dec.Decode(&n); err != nil {
		return nil, fmt.Errorf("the number of targets: %w", err)
	}
	if n < 0 || n > maxTargets {
		return nil, fmt.Errorf("%d targets: want 0 to %d", n, maxTargets)
	}
	targets := make([]watcher.Target, n)
	for i := range targets {
		if err := dec.Decode(&targets[i]); err != nil {
			return nil, fmt.Errorf("target %d of %d: %w", i, n, err)
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more than the %d targets announced", n)
	}
	return targets, nil
}

// cloneAll clones each remote of targets bare into a directory of its
// own, n at a time, and returns the time it took.
func cloneAll(targets []watcher.Target, n int) (time.Duration, error) {
	dir, err := os.MkdirTemp("", "fleet-clones")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	var urls []string
	for _, t := range targets {
		if !slices.Contains(urls[max(0, len(urls)-1):], t.URL) {
			urls = append(urls, t.URL)
		}
	}
	var g errgroup.Group
	g.SetLimit(n)
	start := time.Now()
	for i, u := range urls {
		g.Go(func() error {
			out, err := exec.Command("git", "clone", "-q", "--bare", u, filepath.Join(dir, fmt.Sprint(i))).CombinedOutput()
			if err != nil {
				return fmt.Errorf("git clone %s: %v: %s", u, err, out)
			}
			return nil
		})
	}
	err = g.Wait()
	return time.Since(start), err
}

// fixedShard owns the remotes whose key hashes to its index of n: the
// share a replica of n gets (watcher/cluster's Lease shard moves remotes
// between replicas; this measures what a replica costs with its share).
// With n 0 it owns none: what a replica costs that holds every target and
// polls no remote, the part of each replica's cost that no number of
// replicas divides.
type fixedShard struct{ i, n uint32 }

func (s fixedShard) Owns(key string) bool {
	if s.n == 0 {
		return false
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32()%s.n == s.i
}

func (fixedShard) Changed() <-chan struct{} { return nil }

func parseShard(v string) (*fixedShard, error) {
	switch v {
	case "":
		return nil, nil
	case "none":
		return &fixedShard{}, nil
	}
	var i, n uint32
	if _, err := fmt.Sscanf(v, "%d/%d", &i, &n); err != nil || n == 0 || i >= n {
		return nil, fmt.Errorf("-shard %q: want i/n with i < n, or none", v)
	}
	return &fixedShard{i, n}, nil
}

// runChild watches the targets on stdin until each is delivered, polls
// every remote twice more with nothing new, and reports.
func runChild(heap, cpuProfile, shardArg string, settle time.Duration) error {
	shard, err := parseShard(shardArg)
	if err != nil {
		return err
	}
	targets, err := readTargets(os.Stdin)
	if err != nil {
		return err
	}
	cache, err := os.MkdirTemp("", "fleet-cache")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	var delivered, polled atomic.Int64
	sink := watcher.Named("nop", watcher.SinkFunc(func(context.Context, watcher.Change) error {
		delivered.Add(1)
		return nil
	}))
	obs := watcher.ObserverFunc(func(e watcher.Event) {
		if e.Type == watcher.EventPolled && e.Err == nil {
			polled.Add(1)
		}
	})
	opts := []watcher.Option{watcher.WithCacheDir(cache), watcher.WithInterval(time.Hour), watcher.WithObserver(obs),
		watcher.WithConcurrency(watcher.Concurrency{Fetches: fetches})}
	want := int64(len(targets))
	if shard != nil {
		opts = append(opts, watcher.WithShard(*shard))
		want = 0
		for _, t := range targets {
			if ep, err := gitutil.ParseURL(t.URL); err == nil && shard.Owns(ep.Key()+"#"+(*gitutil.Auth)(nil).Identity()) {
				want++
			}
		}
	}
	w := watcher.New(opts...)
	if err := w.Route(static.New(targets...), sink); err != nil {
		return err
	}
	// The decoded list is the harness's and unused from here on: the
	// source holds its own copy. What decoding it took goes back to the
	// system before the watcher starts, so that RSS is the watcher's and
	// its source's, not the way this process was given its targets.
	debug.FreeOSMemory()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	if p := os.Getenv("FLEET_CPU_START"); p != "" && shard == nil {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	started, startCPU := time.Now(), cpuTime()
	go func() { done <- w.Run(ctx) }()
	deadline := time.Now().Add(*timeout)
	wait := func(cond func() bool) error {
		for !cond() {
			if time.Now().After(deadline) {
				return fmt.Errorf("timed out: %d delivered, %d polls", delivered.Load(), polled.Load())
			}
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	}
	if err := wait(func() bool { return delivered.Load() == want }); err != nil {
		return err
	}
	startUp, startUpCPU := time.Since(started), cpuTime()-startCPU
	if os.Getenv("FLEET_CPU_START") != "" && shard == nil {
		pprof.StopCPUProfile()
	}
	urls, _ := w.Remotes()
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	// With -cpu, the heap profiles before and after the cycles too
	// (<cpu>.heap0, <cpu>.heap1): what the cycles allocated is their
	// difference (go tool pprof -sample_index=alloc_space -diff_base).
	writeHeap := func(name string) error {
		if cpuProfile == "" {
			return nil
		}
		runtime.GC() // a heap profile is as of the last collection
		f, err := os.Create(cpuProfile + name)
		if err != nil {
			return err
		}
		defer f.Close()
		return pprof.WriteHeapProfile(f)
	}
	if err := writeHeap(".heap0"); err != nil {
		return err
	}
	// The cycles start just after a collection, and go on until they made
	// pollsMeasured polls and the runtime collected wantGCs times: a cycle
	// of a big heap allocates less than the heap, so two cycles hold no
	// collection or one, and their CPU is its by a third either way.
	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cycles, wantGCs := 0, collectionsWanted()
	wall, cpu := time.Now(), cpuTime()
	gcCPU, gcIdle := gcTime()
	for len(urls) > 0 && cycles < maxCycles && (cycles < 2 || cycles*len(urls) < pollsMeasured || gcsSince(ms0.NumGC) < wantGCs) {
		before := polled.Load()
		for _, u := range urls {
			w.Trigger(u)
		}
		if err := wait(func() bool { return polled.Load() >= before+int64(len(urls)) }); err != nil {
			return err
		}
		cycles++
	}
	perCycle := func(d time.Duration) time.Duration { return d / time.Duration(max(cycles, 1)) }
	cycleWall, cycleCPU := perCycle(time.Since(wall)), perCycle(cpuTime()-cpu)
	gcCPU1, gcIdle1 := gcTime()
	cycleGC, cycleGCIdle := perCycle(gcCPU1-gcCPU), perCycle(gcIdle1-gcIdle)
	gcs := gcsSince(ms0.NumGC)
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	allocPerPoll := int64(ms1.TotalAlloc-ms0.TotalAlloc) / int64(max(cycles*len(urls), 1))
	pprof.StopCPUProfile()
	if err := writeHeap(".heap1"); err != nil {
		return err
	}
	time.Sleep(settle) // no poll meanwhile: the interval is an hour
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/objects:objects"}}
	metrics.Read(live)
	r := report{Heap: int64(ms.HeapInuse), Live: int64(live[0].Value.Uint64()), Objects: int64(live[1].Value.Uint64()), CycleGC: cycleGC, CycleGCIdle: cycleGCIdle, Goroutines: runtime.NumGoroutine(), Delivered: delivered.Load(), CycleWall: cycleWall, CycleCPU: cycleCPU, Cycles: cycles, CycleGCs: gcs, CycleAlloc: allocPerPoll,
		StartUp: startUp, StartCPU: startUpCPU, Fetches: fetches}
	r.RSS, r.HWM = procStatus("VmRSS"), procStatus("VmHWM")
	debug.FreeOSMemory()
	r.Returned = procStatus("VmRSS")
	if heap != "" {
		f, err := os.Create(heap)
		if err != nil {
			return err
		}
		_ = pprof.WriteHeapProfile(f)
		f.Close()
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// eachOf is d shared by n remotes, to the microsecond.
func eachOf(d time.Duration, n int) time.Duration {
	return (d / time.Duration(n)).Round(time.Microsecond)
}

// gcTime is the time the runtime counts as its collector's so far (the
// time its workers held a P), and the part of it its idle-priority mark
// workers took.
func gcTime() (total, idle time.Duration) {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/idle:cpu-seconds"}}
	metrics.Read(s)
	return time.Duration(s[0].Value.Float64() * float64(time.Second)), time.Duration(s[1].Value.Float64() * float64(time.Second))
}

// procStatus reads a "kB" line of /proc/self/status, in bytes.
func procStatus(key string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n * 1024
		}
	}
	return 0
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
