// Command watchbench measures the watcher against what its users run
// today and prints one markdown table: each figure beside a baseline
// measured in the same run, against the real git server on loopback.
//
//	P1 ref listings per cycle, many targets over many repositories
//	P2 wall time of a no-change cycle vs git ls-remote at equal concurrency
//	P3 one new commit on a large repository: detect, fetch, diff vs git fetch
//	P4 the same vs a fresh depth-1 clone with checkout (what Flux does)
//	P5 push hint to delivery vs polling at the default interval
//	P6 peak memory: incremental fetch and cold first sync vs the git CLI
//	P7 a commit outside the watched path: deliveries and tree objects read
//
//	go run ./internal/dev/bench/watchbench -out bench-results/table.md
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/bench/harness"
	"github.com/modwatch/modwatch/internal/dev/bench/quantile"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
)

type config struct {
	repos, perRepo, commits, files, runs, pushes, polled int
	out, p3Profile                                       string
}

func main() {
	var c config
	flag.IntVar(&c.repos, "repos", 100, "P1/P2: repositories")
	flag.IntVar(&c.perRepo, "per-repo", 10, "P1/P2: targets per repository")
	flag.IntVar(&c.commits, "commits", 10000, "P3/P4/P6/P7: commits in the large repository")
	flag.IntVar(&c.files, "files", 10000, "P3/P4/P6/P7: files of ~4 KiB in the large repository")
	flag.IntVar(&c.runs, "runs", 3, "runs per measurement (medians are reported)")
	flag.IntVar(&c.pushes, "pushes", 100, "P5: pushes announced by a webhook")
	flag.IntVar(&c.polled, "polled", 3, "P5: pushes found by polling at the default interval")
	flag.StringVar(&c.out, "out", "", "also write the table to this file")
	flag.StringVar(&c.p3Profile, "p3-profile", "", "write CPU and allocation profiles of the P3 runs (this process) to this prefix + .cpu/.heap")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "watchbench:", err)
		os.Exit(1)
	}
}

// events collects a watcher's events for the waits below.
type events struct {
	mu   sync.Mutex
	all  []watcher.Event
	tick chan struct{}
}

func newEvents() *events { return &events{tick: make(chan struct{}, 1)} }

func (e *events) Observe(ev watcher.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	select {
	case e.tick <- struct{}{}:
	default:
	}
}

// wait waits until count(match) >= n.
// count counts the events of a type so far.
func (e *events) count(t watcher.EventType) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := 0
	for _, ev := range e.all {
		if ev.Type == t {
			k++
		}
	}
	return k
}

func (e *events) wait(n int, limit time.Duration, match func(watcher.Event) bool) error {
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	for {
		e.mu.Lock()
		got := 0
		for _, ev := range e.all {
			if match(ev) {
				got++
			}
		}
		e.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-e.tick:
		case <-timeout.C:
			return fmt.Errorf("timed out: %d of %d events", got, n)
		}
	}
}

func polledSince(t0 time.Time) func(watcher.Event) bool {
	return func(e watcher.Event) bool {
		return e.Type == watcher.EventPolled && !e.Time.Add(-e.Duration).Before(t0)
	}
}

func delivered(id, commit string) func(watcher.Event) bool {
	return func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Target.ID == id && e.Commit.String() == commit
	}
}

func start(w *watcher.Watcher) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	return func() error { cancel(); return <-errc }
}

type row = harness.Row

func med(ds []time.Duration) time.Duration { return quantile.Of(ds, 0.5) }

func timeCmd(args ...string) (time.Duration, error) {
	start := time.Now()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return time.Since(start), nil
}

func run(c config) (err error) {
	env := &gittest.Standalone{}
	defer env.Close()
	defer env.Recover(&err)
	srv := gittest.NewServer(env)
	var rows []row
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }

	// P1, P2: a fleet of repositories, several targets each.
	var fleet []*gittest.Repo
	var targets []watcher.Target
	for i := range c.repos {
		r := srv.NewRepo(env, fmt.Sprintf("fleet/r%03d", i))
		var files []gittest.Change
		for j := range c.perRepo {
			files = append(files, gittest.File(fmt.Sprintf("app%d/cm.yaml", j), "v1"))
			targets = append(targets, watcher.Target{ID: fmt.Sprintf("r%03d/app%d", i, j), URL: r.URL(), Path: fmt.Sprintf("app%d", j)})
		}
		r.Commit(env, "init", files...)
		fleet = append(fleet, r)
	}
	ev := newEvents()
	nop := watcher.Named("nop", watcher.SinkFunc(func(context.Context, watcher.Change) error { return nil }))
	w := watcher.New(watcher.WithCacheDir(env.TempDir()), watcher.WithInterval(time.Hour), watcher.WithObserver(ev))
	if err := w.Route(static.New(targets...), nop); err != nil {
		return err
	}
	stop := start(w)
	defer func() {
		if serr := stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	if err := ev.wait(len(targets), 5*time.Minute, func(e watcher.Event) bool { return e.Type == watcher.EventDelivered }); err != nil {
		return fmt.Errorf("fleet sync: %w", err)
	}
	lists := func() (n int64) {
		for _, r := range fleet {
			n += r.Counts().Lists.Load()
		}
		return n
	}
	cycle := func() (time.Duration, error) {
		t0 := time.Now()
		for _, r := range fleet {
			w.Trigger(r.URL())
		}
		if err := ev.wait(len(fleet), time.Minute, polledSince(t0)); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	if _, err := cycle(); err != nil { // settle
		return err
	}
	var ourCycles, cliCycles []time.Duration
	var listed int64
	for range c.runs {
		l0 := lists()
		d, err := cycle()
		if err != nil {
			return err
		}
		ourCycles, listed = append(ourCycles, d), lists()-l0
		d, err = parallel(16, len(fleet), func(i int) error {
			_, err := timeCmd("git", "ls-remote", "-q", fleet[i].URL())
			return err
		})
		if err != nil {
			return err
		}
		cliCycles = append(cliCycles, d)
	}
	l0 := lists()
	if _, err := parallel(16, len(targets), func(i int) error {
		_, err := gitutil.ListRefs(context.Background(), targets[i].URL, nil, nil)
		return err
	}); err != nil {
		return err
	}
	perTarget := lists() - l0
	rows = append(rows,
		harness.NewRow("P1", fmt.Sprintf("ref listings per cycle, %d targets over %d repositories", len(targets), len(fleet)),
			fmt.Sprint(listed), fmt.Sprintf("%d (per-target polling)", perTarget), fmt.Sprintf("%.2f", float64(listed)/float64(perTarget)), "one per repository"),
		harness.NewRow("P2", "wall time of a no-change cycle", med(ourCycles).Round(time.Millisecond).String(),
			med(cliCycles).Round(time.Millisecond).String()+" (git ls-remote, 16 at once)", fmt.Sprintf("%.2f", float64(med(ourCycles))/float64(med(cliCycles))), "≤ 0.25"))
	logf("P1/P2 done")

	// P5: push hint vs polling at the default interval.
	hookSecret := "bench"
	hooks, err := webhook.New(webhook.Config{GenericSecret: hookSecret, MinInterval: time.Nanosecond}, w)
	if err != nil {
		return err
	}
	defer hooks.Close()
	hookSrv := httptest.NewServer(hooks)
	defer hookSrv.Close()
	hinted := fleet[0]
	body := []byte(`{"repository": "` + hinted.URL() + `"}`)
	var hintLat []time.Duration
	for i := range c.pushes {
		commit := hinted.Commit(env, "hint", gittest.File("app0/cm.yaml", fmt.Sprint("hint ", i)))
		t0 := time.Now()
		req, _ := http.NewRequest(http.MethodPost, hookSrv.URL, bytes.NewReader(body))
		req.Header.Set("X-Signature", webhook.Sign(hookSecret, body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if err := ev.wait(1, time.Minute, delivered("r000/app0", commit)); err != nil {
			return err
		}
		hintLat = append(hintLat, time.Since(t0))
	}
	var pollLat []time.Duration
	if c.polled > 0 {
		pr := srv.NewRepo(env, "poll/r")
		pr.Commit(env, "init", gittest.File("app/cm.yaml", "v0"))
		pev := newEvents()
		pw := watcher.New(watcher.WithCacheDir(env.TempDir()), watcher.WithObserver(pev)) // the default interval
		if err := pw.Route(static.New(watcher.Target{ID: "p", URL: pr.URL()}), nop); err != nil {
			return err
		}
		pstop := start(pw)
		if err := pev.wait(1, time.Minute, func(e watcher.Event) bool { return e.Type == watcher.EventDelivered }); err != nil {
			return err
		}
		for i := range c.polled {
			pause := time.NewTimer(time.Duration(rand.Int64N(int64(time.Minute))))
			<-pause.C
			commit := pr.Commit(env, "poll", gittest.File("app/cm.yaml", fmt.Sprint("poll ", i)))
			t0 := time.Now()
			if err := pev.wait(1, 3*time.Minute, delivered("p", commit)); err != nil {
				return err
			}
			pollLat = append(pollLat, time.Since(t0))
			logf("P5 polled push %d/%d: %s", i+1, c.polled, pollLat[i].Round(time.Millisecond))
		}
		if err := pstop(); err != nil {
			return err
		}
	}
	p5 := harness.NewRow("P5", fmt.Sprintf("push → delivery, median / p99 (%d hinted, %d polled pushes)", len(hintLat), len(pollLat)),
		fmt.Sprintf("%s / %s", quantile.Of(hintLat, 0.5).Round(time.Millisecond), quantile.Of(hintLat, 0.99).Round(time.Millisecond)), "", "", "hint ≪ polling")
	if len(pollLat) > 0 {
		p5.Base = fmt.Sprintf("%s / %s (polling every 1m)", quantile.Of(pollLat, 0.5).Round(time.Second), quantile.Of(pollLat, 0.99).Round(time.Second))
		p5.Ratio = fmt.Sprintf("%.4f", float64(quantile.Of(hintLat, 0.5))/float64(quantile.Of(pollLat, 0.5)))
	}
	logf("P5 done")

	// P3, P4, P6, P7: a large repository with two top-level directories.
	big := srv.NewRepo(env, "big/mono")
	if err := harness.Generate(big.BareDir(), c.commits, c.files, 4096, []string{"app", "docs"}); err != nil {
		return err
	}
	big.Git(env, "pull", "-q", "origin", "main")
	logf("large repository generated")
	// The measured processes are a program that links the watcher and
	// nothing else (see internal/dev/bench/child), built outside the tree.
	self := filepath.Join(env.TempDir(), "child")
	if out, err := exec.Command("go", "build", "-o", self, "github.com/modwatch/modwatch/internal/dev/bench/child").CombinedOutput(); err != nil {
		return fmt.Errorf("build the child: %v\n%s", err, out)
	}
	scratch := env.TempDir()
	n := 0
	fresh := func() string { n++; return filepath.Join(scratch, fmt.Sprint(n)) }

	// P6 cold: a whole first sync in its own process vs git clone --bare.
	coldOurs, err := harness.Measure(c.runs, func() []string { return []string{self, "sync", "-url", big.URL(), "-dir", fresh()} })
	if err != nil {
		return err
	}
	coldCLI, err := harness.Measure(c.runs, func() []string { return []string{"git", "clone", "-q", "--bare", big.URL(), fresh()} })
	if err != nil {
		return err
	}
	logf("P6 cold done")

	bcw, err := startCounted(env.TempDir(), watcher.Target{ID: "mono", URL: big.URL(), Path: "app"}, nop)
	if err != nil {
		return err
	}
	defer func() {
		if serr := bcw.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	bw, bev, counted := bcw.w, bcw.ev, bcw.git
	cliMirror, goMirror := fresh(), fresh()
	if _, err := timeCmd("git", "clone", "-q", "--bare", big.URL(), cliMirror); err != nil {
		return err
	}
	if _, err := timeCmd(self, "fetch", "-url", big.URL(), "-dir", goMirror); err != nil {
		return err
	}
	var ours, cliFetch, clone []time.Duration
	// The bytes of the answers to ref listings and fetches (version 2's
	// capability advertisement, which git fetch asks for each time and the
	// watcher once, is left out of both).
	var oursBytes, cliBytes []int64
	received := func() int64 { return big.Counts().ListBytes.Load() + big.Counts().FetchBytes.Load() }
	var incOurs, incCLI []harness.Result
	if c.p3Profile != "" {
		stop, err := harness.Profile(c.p3Profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	for i := range c.runs {
		commit := big.Commit(env, "bump", gittest.File("app/00000", fmt.Sprint("bump ", i)))
		b0 := received()
		t0 := time.Now()
		bw.Trigger(big.URL())
		if err := bev.wait(1, time.Minute, delivered("mono", commit)); err != nil {
			return err
		}
		ours = append(ours, time.Since(t0))
		oursBytes = append(oursBytes, received()-b0)
		b0 = received()
		d, err := timeCmd("git", "-C", cliMirror, "fetch", "-q", big.URL(), "+refs/heads/main:refs/heads/main")
		if err != nil {
			return err
		}
		cliFetch = append(cliFetch, d)
		cliBytes = append(cliBytes, received()-b0)
		dir := fresh()
		d, err = timeCmd("git", "clone", "-q", "--depth", "1", big.URL(), dir)
		if err != nil {
			return err
		}
		clone = append(clone, d)
		_ = os.RemoveAll(dir)
		// P6 incremental, each in its own process, on the same new commit.
		r, err := harness.Measure(1, func() []string { return []string{self, "fetch", "-url", big.URL(), "-dir", goMirror} })
		if err != nil {
			return err
		}
		incOurs = append(incOurs, r)
		cliCommit := big.Commit(env, "bump for the CLI", gittest.File("docs/00003", fmt.Sprint("cli ", i)))
		r, err = harness.Measure(1, func() []string {
			return []string{"git", "-C", cliMirror, "fetch", "-q", big.URL(), "+refs/heads/main:refs/heads/main"}
		})
		if err != nil {
			return err
		}
		incCLI = append(incCLI, r)
		// The watcher takes that commit too (outside its path), so that
		// the next run fetches one new commit, as git fetch does.
		bw.Trigger(big.URL())
		if err := bev.wait(1, time.Minute, func(e watcher.Event) bool { return e.Type == watcher.EventUpToDate && e.Commit.String() == cliCommit }); err != nil {
			return err
		}
	}
	rssMed := func(rs []harness.Result) int64 {
		v := make([]int64, len(rs))
		for i, r := range rs {
			v[i] = r.RSS
		}
		return quantile.Of(v, 0.5)
	}
	logf("P3/P4/P6 done")

	// P7: a commit outside the watched path.
	deliveries := func() int { return bev.count(watcher.EventDelivered) }
	d0, trees0 := deliveries(), counted.treesRead()
	outside := big.Commit(env, "docs only", gittest.File("docs/00001", "docs changed"))
	bw.Trigger(big.URL())
	if err := bev.wait(1, time.Minute, func(e watcher.Event) bool { return e.Type == watcher.EventUpToDate && e.Commit.String() == outside }); err != nil {
		return err
	}
	trees := counted.treesRead() - trees0
	logf("P7 done")

	// P7 with ignore patterns: the whole repository but docs/ and *.md,
	// in a watcher of its own so that its trees are counted alone.
	icw, err := startCounted(env.TempDir(), watcher.Target{ID: "mono-ignore", URL: big.URL(), Ignore: []string{"docs/", "*.md"}, IgnoreFile: ".sourceignore"}, nop)
	if err != nil {
		return err
	}
	defer func() {
		if serr := icw.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	iw, iev, icounted := icw.w, icw.ev, icw.git
	firstTrees := icounted.treesRead()
	id0, itrees0 := iev.count(watcher.EventDelivered), icounted.treesRead()
	ignored := big.Commit(env, "ignored only", gittest.File("docs/00002", "docs changed"), gittest.File("app/NOTES.md", "notes"))
	iw.Trigger(big.URL())
	if err := iev.wait(1, time.Minute, func(e watcher.Event) bool { return e.Type == watcher.EventUpToDate && e.Commit.String() == ignored }); err != nil {
		return err
	}
	itrees := icounted.treesRead() - itrees0
	ideliveries := iev.count(watcher.EventDelivered) - id0
	logf("P7 with ignore patterns done")

	ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.2f", float64(a)/float64(b)) }
	rows = append(rows,
		harness.NewRow("P3", fmt.Sprintf("one new commit on %d commits × %d files: detect + fetch + path diff + delivery", c.commits, c.files),
			med(ours).Round(time.Millisecond).String(), med(cliFetch).Round(time.Millisecond).String()+" (git fetch into a bare mirror)", ratio(med(ours), med(cliFetch)), "≤ 0.5"),
		harness.NewRow("P3", "the same: bytes received (ref listing + pack)", fmt.Sprintf("%d B", quantile.Of(oursBytes, 0.5)),
			fmt.Sprintf("%d B (git fetch)", quantile.Of(cliBytes, 0.5)), fmt.Sprintf("%.2f", float64(quantile.Of(oursBytes, 0.5))/float64(quantile.Of(cliBytes, 0.5))), ""),
		harness.NewRow("P4", "the same vs a fresh depth-1 clone with checkout", med(ours).Round(time.Millisecond).String(),
			med(clone).Round(time.Millisecond).String()+" (git clone --depth 1)", ratio(med(ours), med(clone)), "≤ 0.1 (10× faster)"),
		p5,
		harness.NewRow("P6", "peak RSS, incremental fetch of one commit", fmt.Sprintf("%d MiB", rssMed(incOurs)/1024),
			fmt.Sprintf("%d MiB (git fetch)", rssMed(incCLI)/1024), fmt.Sprintf("%.2f", float64(rssMed(incOurs))/float64(rssMed(incCLI))), "≤ 1.0"),
		harness.NewRow("P8", "cold first sync (watcher to first delivery): peak RSS", fmt.Sprintf("%d MiB", coldOurs.RSS/1024),
			fmt.Sprintf("%d MiB (git clone --bare)", coldCLI.RSS/1024), fmt.Sprintf("%.2f", float64(coldOurs.RSS)/float64(coldCLI.RSS)), "≤ 1.5"),
		harness.NewRow("P8", "cold first sync: wall time", coldOurs.Wall.Round(time.Millisecond).String(),
			coldCLI.Wall.Round(time.Millisecond).String()+" (git clone --bare)", ratio(coldOurs.Wall, coldCLI.Wall), "≤ 1.0"),
		harness.NewRow("P7", "a commit outside the watched path: deliveries / tree objects read", fmt.Sprintf("%d / %d", deliveries()-d0, trees),
			fmt.Sprintf("1 / %d (a re-clone and render reads every object)", c.files+3), "", "0 deliveries"),
		harness.NewRow("P7", "a commit of ignored files only (whole repository, ignore docs/ and *.md, .sourceignore read): deliveries / tree objects read",
			fmt.Sprintf("%d / %d (%d at the first commit: every tree, once)", ideliveries, itrees, firstTrees),
			fmt.Sprintf("1 / %d (a re-clone and render reads every object)", c.files+3), "", "0 deliveries"),
	)
	slices.SortStableFunc(rows, func(a, b row) int { return strings.Compare(a.ID, b.ID) })

	return harness.PrintTable(rows, c.out)
}

// parallel runs f(0..n-1) with at most k at once and returns the wall time.
func parallel(k, n int, f func(i int) error) (time.Duration, error) {
	start := time.Now()
	sem := make(chan struct{}, k)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}

// countedWatcher is a running watcher of one target whose mirrors' tree
// reads are counted.
type countedWatcher struct {
	w    *watcher.Watcher
	ev   *events
	git  *countingGit
	stop func() error
}

// startCounted runs a watcher of t into sink and waits for its first
// delivery.
func startCounted(dir string, t watcher.Target, sink watcher.Sink) (*countedWatcher, error) {
	cw := &countedWatcher{ev: newEvents(), git: &countingGit{GoGit: watcher.DefaultGit()}}
	cw.w = watcher.New(watcher.WithCacheDir(dir), watcher.WithInterval(time.Hour), watcher.WithObserver(cw.ev), watcher.WithGit(cw.git))
	if err := cw.w.Route(static.New(t), sink); err != nil {
		return nil, err
	}
	cw.stop = start(cw.w)
	if err := cw.ev.wait(1, 10*time.Minute, func(e watcher.Event) bool { return e.Type == watcher.EventDelivered }); err != nil {
		return nil, errors.Join(err, cw.stop())
	}
	return cw, nil
}

// countingGit is the watcher's default git, keeping the mirrors it opens
// to count the trees read from them.
type countingGit struct {
	watcher.GoGit
	mu      sync.Mutex
	mirrors []*mirror.Mirror
}

func (g *countingGit) OpenMirror(dir, url string, opts mirror.Options) (watcher.Mirror, error) {
	m, err := g.GoGit.OpenMirror(dir, url, opts)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.mirrors = append(g.mirrors, m.(*mirror.Mirror))
	g.mu.Unlock()
	return m, nil
}

func (g *countingGit) treesRead() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n int64
	for _, m := range g.mirrors {
		n += m.TreesRead()
	}
	return n
}
