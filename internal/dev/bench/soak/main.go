// Command soak measures what months of polling do to a mirror, and how far
// stalled remotes delay a healthy one, against the real git server on
// loopback; it prints a markdown table of ratios to baselines measured in
// the same run.
//
//	S1 5,000 incremental fetches into one mirror of a 10,000-commit
//	   repository, each followed by a tree read: the mean cost of the last
//	   100 polls against the first 100 (goal ≤ 1.1)
//	S2 the mirror's disk size after them against a fresh
//	   git clone --mirror of the same repository (goal ≤ 1.2)
//	H1 push→delivery of a healthy remote while N remotes are stalled
//	   mid-fetch, against the same with none stalled (goal: within one poll
//	   interval plus its own fetch)
//	P14 a no-change poll's listing of a remote with 20,000 refs: bytes on
//	   the wire and time, against git ls-remote of the same ref (goal
//	   ≤ 1 KiB)
//
//	go run ./internal/dev/bench/soak -out bench-results/soak.md
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/bench/harness"
	"github.com/modwatch/modwatch/internal/dev/bench/quantile"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

type config struct {
	commits, files, fetches, window, stalled, runs, refs int
	out, cpuProfile                                      string
	skipHOL                                              bool
}

func main() {
	var c config
	flag.IntVar(&c.commits, "commits", 10000, "S1/S2: commits in the repository")
	flag.IntVar(&c.files, "files", 10000, "S1/S2: files of ~4 KiB in the repository")
	flag.IntVar(&c.fetches, "fetches", 5000, "S1: incremental fetches")
	flag.IntVar(&c.window, "window", 100, "S1: polls averaged at each end")
	flag.IntVar(&c.stalled, "stalled", 8, "H1: most remotes stalled mid-fetch")
	flag.IntVar(&c.runs, "runs", 5, "H1: pushes per case (medians are reported)")
	flag.StringVar(&c.out, "out", "", "also write the table to this file")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the S1 polls to this file")
	flag.BoolVar(&c.skipHOL, "skip-h1", false, "measure S1 and S2 only")
	flag.IntVar(&c.refs, "refs", 20000, "P14: refs of the listed repository")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

type row = harness.Row

func run(c config) (err error) {
	env := &gittest.Standalone{}
	defer env.Close()
	defer env.Recover(&err)
	srv := gittest.NewServer(env)
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	var rows []row

	// P14.
	p14, err := listingCost(env, srv, c.refs, c.runs*4)
	if err != nil {
		return fmt.Errorf("P14: %w", err)
	}
	rows = append(rows, p14...)
	logf("P14 done")

	// S1, S2.
	repo := srv.NewRepo(env, "soak/r")
	if err := harness.Generate(repo.BareDir(), c.commits, c.files, 4096, []string{"app", "docs"}); err != nil {
		return err
	}
	repo.Git(env, "pull", "-q", "origin", "main")
	logf("generated %d commits", c.commits)
	mirrorDir := filepath.Join(env.TempDir(), "mirror")
	git, _ := exec.LookPath("git")
	m, err := mirror.Open(mirrorDir, repo.URL(), mirror.Options{GitCLI: git})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if _, err := m.Fetch(ctx, nil, []string{"refs/heads/main"}); err != nil {
		return err
	}
	poll := func(i int) (time.Duration, error) {
		name := fmt.Sprintf("app/%05d", (i*7)%c.files&^1) // "app" holds the even files
		commit := repo.Commit(env, fmt.Sprint("soak ", i), gittest.File(name, fmt.Sprint("soak ", i)))
		start := time.Now()
		res, err := m.Fetch(ctx, nil, []string{"refs/heads/main"})
		if err != nil {
			return 0, err
		}
		if got := res.Refs["refs/heads/main"].String(); got != commit {
			return 0, fmt.Errorf("fetched %s, pushed %s", got, commit)
		}
		fsys, err := m.FS(res.Refs["refs/heads/main"], mirror.Selection{Path: "app"})
		if err != nil {
			return 0, err
		}
		defer fsys.(io.Closer).Close()
		data, err := fs.ReadFile(fsys, strings.TrimPrefix(name, "app/"))
		if err != nil {
			return 0, err
		}
		if string(data) != fmt.Sprint("soak ", i) {
			return 0, fmt.Errorf("read %q", data)
		}
		return time.Since(start), nil
	}
	var first, last time.Duration
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer f.Close()
	}
	for i := range c.fetches {
		if i > 0 && i%500 == 0 {
			// The server's loose objects from 500 pushes, packed: the
			// measurement is of the mirror, not of the server.
			if out, err := exec.Command("git", "--git-dir", repo.BareDir(), "repack", "-adq").CombinedOutput(); err != nil {
				return fmt.Errorf("repack the server: %v: %s", err, out)
			}
			logf("%d fetches, %d repacks of the mirror", i, m.Repacks())
		}
		d, err := poll(i)
		if err != nil {
			return fmt.Errorf("poll %d: %w", i, err)
		}
		switch {
		case i < c.window:
			first += d
		case i >= c.fetches-c.window:
			last += d
		}
	}
	pprof.StopCPUProfile()
	firstMean, lastMean := first/time.Duration(c.window), last/time.Duration(c.window)
	rows = append(rows, harness.NewRow("S1", fmt.Sprintf("mean fetch + tree read, last %d of %d polls (%d repacks)", c.window, c.fetches, m.Repacks()),
		lastMean.Round(10*time.Microsecond).String(), firstMean.Round(10*time.Microsecond).String()+" (first "+fmt.Sprint(c.window)+")",
		fmt.Sprintf("%.2f", float64(lastMean)/float64(firstMean)), "≤ 1.1"))
	if out, err := exec.Command("git", "--git-dir", repo.BareDir(), "repack", "-adq").CombinedOutput(); err != nil {
		return fmt.Errorf("repack the server: %v: %s", err, out)
	}
	fresh := filepath.Join(env.TempDir(), "fresh")
	if out, err := exec.Command("git", "clone", "-q", "--mirror", repo.URL(), fresh).CombinedOutput(); err != nil {
		return fmt.Errorf("git clone --mirror: %v: %s", err, out)
	}
	ours, err := harness.DirSize(mirrorDir)
	if err != nil {
		return err
	}
	theirs, err := harness.DirSize(fresh)
	if err != nil {
		return err
	}
	rows = append(rows, harness.NewRow("S2", "mirror disk size after the soak", mib(ours), mib(theirs)+" (fresh git clone --mirror)",
		fmt.Sprintf("%.2f", float64(ours)/float64(theirs)), "≤ 1.2"))
	logf("S1/S2 done")

	// H1.
	if c.skipHOL {
		return harness.PrintTable(rows, c.out)
	}
	healthy := srv.NewRepo(env, "hol/healthy")
	healthy.Commit(env, "0", gittest.File("f", "0"))
	var stalled []*gittest.Repo
	for i := range c.stalled {
		r := srv.NewRepo(env, fmt.Sprintf("hol/stalled%d", i))
		r.Commit(env, "0", gittest.File("f", "0"))
		srv.Stall(r.Name(), 0)
		stalled = append(stalled, r)
	}
	const interval = time.Minute // the default poll interval
	var base time.Duration
	for _, n := range []int{0, 4, c.stalled} {
		d, err := headOfLine(env, healthy, stalled[:n], c.runs)
		if err != nil {
			return fmt.Errorf("H1 with %d stalled: %w", n, err)
		}
		if n == 0 {
			base = d
			continue
		}
		rows = append(rows, harness.NewRow("H1", fmt.Sprintf("healthy remote's sync, %d remotes stalled mid-fetch (4 fetch slots)", n),
			d.Round(time.Millisecond).String(), base.Round(time.Millisecond).String()+" (none stalled)",
			fmt.Sprintf("%.1f", float64(d)/float64(base)), fmt.Sprintf("≤ %s + own fetch", interval)))
		logf("H1 with %d stalled done", n)
	}

	return harness.PrintTable(rows, c.out)
}

// headOfLine measures, runs times, a healthy remote's first sync while the
// stalled remotes are mid-fetch: a new watcher (default fetch slots and
// stall timeouts) of the stalled remotes waits until each has sent its
// fetch, then is given the healthy target. It returns the median time from
// then to the healthy remote's delivery.
func headOfLine(env *gittest.Standalone, healthy *gittest.Repo, stalled []*gittest.Repo, runs int) (time.Duration, error) {
	var ds []time.Duration
	for range runs {
		d, err := headOfLineOnce(env, healthy, stalled)
		if err != nil {
			return 0, err
		}
		ds = append(ds, d)
	}
	return quantile.Of(ds, 0.5), nil
}

func headOfLineOnce(env *gittest.Standalone, healthy *gittest.Repo, stalled []*gittest.Repo) (time.Duration, error) {
	var targets []watcher.Target
	before := make([]int64, len(stalled))
	for i, r := range stalled {
		targets = append(targets, watcher.Target{ID: fmt.Sprint("stalled", i), URL: r.URL()})
		before[i] = r.Counts().Fetches.Load()
	}
	src := watchertest.NewSource(targets...)
	sink := watchertest.NewSink("rec")
	w := watcher.New(watcher.WithCacheDir(env.TempDir()), watcher.WithInterval(time.Hour))
	if err := w.Route(src, sink); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = w.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	for j, r := range stalled {
		for deadline := time.Now().Add(time.Minute); r.Counts().Fetches.Load() == before[j]; {
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("%s never fetched", r.Name())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	commit := strings.TrimSpace(healthy.Git(env, "rev-parse", "HEAD"))
	start := time.Now()
	src.Set(append(targets, watcher.Target{ID: "healthy", URL: healthy.URL()})...)
	if err := waitDelivered(sink, commit, 5*time.Minute); err != nil {
		return 0, err
	}
	d := time.Since(start)
	cancel()
	wg.Wait()
	return d, runErr
}

// listingCost lists HEAD of a repository with n pull-request refs, as the
// watcher's poll does, against git ls-remote of HEAD (protocol v2 with a
// ref prefix) and against the whole version 0 advertisement.
func listingCost(env *gittest.Standalone, srv *gittest.Server, n, runs int) ([]row, error) {
	repo := srv.NewRepo(env, "p14/r")
	commit := repo.Commit(env, "1", gittest.File("f", "1"))
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "create refs/pull/%d/head %s\n", i, commit)
	}
	cmd := exec.Command("git", "update-ref", "--stdin")
	cmd.Env = append(os.Environ(), "GIT_DIR="+repo.BareDir())
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("update-ref: %v: %s", err, out)
	}
	measure := func(list func() error) (int64, time.Duration, error) {
		var ds []time.Duration
		var bytes int64
		for range runs {
			before := repo.Counts().ListBytes.Load()
			start := time.Now()
			if err := list(); err != nil {
				return 0, 0, err
			}
			ds = append(ds, time.Since(start))
			bytes = repo.Counts().ListBytes.Load() - before
		}
		return bytes, quantile.Of(ds, 0.5), nil
	}
	ctx := context.Background()
	oursB, oursT, err := measure(func() error {
		_, err := gitutil.ListRefs(ctx, repo.URL(), nil, []string{"HEAD"})
		return err
	})
	if err != nil {
		return nil, err
	}
	gitB, gitT, err := measure(func() error {
		// --heads makes git send a ref prefix (refs/heads/); a bare
		// pattern ("HEAD") is matched on the client, after the whole
		// listing arrived.
		out, err := exec.Command("git", "ls-remote", "--heads", repo.URL(), "main").CombinedOutput()
		if err != nil {
			return fmt.Errorf("git ls-remote: %v: %s", err, out)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	v0B, v0T, err := measure(func() error {
		_, err := gitutil.ListRefs(ctx, repo.URL(), nil, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	return []row{
		harness.NewRow("P14", fmt.Sprintf("bytes of a no-change poll's listing, %d refs", n), fmt.Sprintf("%d B", oursB),
			fmt.Sprintf("%d B (git ls-remote --heads main, v2); %d B (the whole v0 advertisement)", gitB, v0B),
			fmt.Sprintf("%.2f", float64(oursB)/float64(gitB)), "≤ 1 KiB"),
		harness.NewRow("P14", fmt.Sprintf("time of that listing, %d refs", n), oursT.Round(10*time.Microsecond).String(),
			fmt.Sprintf("%s (git ls-remote --heads main); %s (the whole v0)", gitT.Round(10*time.Microsecond), v0T.Round(10*time.Microsecond)),
			fmt.Sprintf("%.2f", float64(oursT)/float64(gitT)), "≤ 1.0"),
	}, nil
}

func waitDelivered(sink *watchertest.Sink, commit string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, c := range sink.Delivered() {
			if c.Target.ID == "healthy" && c.To.String() == commit {
				return nil
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("%s not delivered within %s", commit, limit)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
