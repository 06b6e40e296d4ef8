// Command widetree measures publishing a wide tree with sink/dir from a
// mirror's fs.FS against git archive | tar -x of the same commit, and
// examples/gitsync's git worktree against git worktree add, each in a
// process of its own (wall time and peak RSS, medians), on a repository of
// 10,000 files in one directory and one of 10,000 files over 100
// directories; it prints a markdown table.
//
//	go run ./internal/dev/bench/widetree -out bench-results/widetree.md
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/bench/harness"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/watcher"
)

func main() {
	files := flag.Int("files", 10000, "files per repository")
	runs := flag.Int("runs", 5, "runs per measurement (medians are reported)")
	out := flag.String("out", "", "also write the table to this file")
	child := flag.String("child", "", "internal: publish the mirror in this directory")
	commit := flag.String("commit", "", "internal: the commit to publish")
	root := flag.String("root", "", "internal: where to publish")
	flag.Parse()
	var err error
	if *child != "" {
		err = publish(*child, *commit, *root)
	} else {
		err = run(*files, *runs, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "widetree:", err)
		os.Exit(1)
	}
}

// publish is the measured process: open the mirror, publish the commit's
// tree with sink/dir.
func publish(mirrorDir, commit, root string) error {
	if p := os.Getenv("WIDETREE_PROFILE"); p != "" {
		f, err := os.Create(p + "." + commit[:8])
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	m, err := mirror.Open(mirrorDir, "https://example.invalid/r.git", mirror.Options{})
	if err != nil {
		return err
	}
	h, err := gitutil.ParseHash(commit)
	if err != nil {
		return err
	}
	fsys, err := m.FS(h, mirror.Selection{})
	if err != nil {
		return err
	}
	return dir.New(root).Deliver(context.Background(), watcher.Change{Target: watcher.Target{ID: "t"}, To: h, FS: fsys})
}

func run(files, runs int, out string) (err error) {
	env := &gittest.Standalone{}
	defer env.Close()
	defer env.Recover(&err)
	srv := gittest.NewServer(env)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("| layout: modwatch vs baseline | modwatch: wall / peak RSS | baseline: wall / peak RSS | wall ratio | goal |\n|---|---|---|---|---|\n")
	for _, layout := range []struct {
		name string
		dirs []string
	}{
		{fmt.Sprintf("%d files in one directory", files), []string{"wide"}},
		{fmt.Sprintf("%d files over 100 directories", files), hundred()},
	} {
		repo := srv.NewRepo(env, "wide/"+layout.dirs[0])
		if err := harness.Generate(repo.BareDir(), 1, files, 4096, layout.dirs); err != nil {
			return err
		}
		head, err := exec.Command("git", "--git-dir", repo.BareDir(), "rev-parse", "HEAD").Output()
		if err != nil {
			return err
		}
		commit := strings.TrimSpace(string(head))
		mirrorDir := filepath.Join(env.TempDir(), "mirror")
		m, err := mirror.Open(mirrorDir, repo.URL(), mirror.Options{GitCLI: "git"})
		if err != nil {
			return err
		}
		if _, err := m.Fetch(context.Background(), nil, []string{"refs/heads/main"}); err != nil {
			return err
		}
		// Each run starts with the page cache written back (sync), so that
		// neither side pays for the other's writes, and the two sides take
		// turns going first: where and when a directory is created decides
		// how ext4 allocates its inodes, which can cost more than the rest.
		measureOurs := func() (harness.Result, error) {
			return harness.Measure(1, func() []string {
				_ = exec.Command("sync").Run()
				return []string{self, "-child", mirrorDir, "-commit", commit, "-root", env.TempDir()}
			})
		}
		// Into the same place sink/dir writes (root/.trees/<tree>).
		measureTheirs := func() (harness.Result, error) {
			return harness.Measure(1, func() []string {
				_ = exec.Command("sync").Run()
				into := filepath.Join(env.TempDir(), ".trees", "tree")
				if err := os.MkdirAll(into, 0o755); err != nil {
					panic(err)
				}
				return []string{"sh", "-c", `git --git-dir="$1" archive "$2" | tar -x -C "$3"`, "sh", mirrorDir, commit, into}
			})
		}
		var oursRuns, theirsRuns []harness.Result
		for i := range runs {
			sides := []func() (harness.Result, error){measureOurs, measureTheirs}
			if i%2 == 1 {
				sides[0], sides[1] = sides[1], sides[0]
			}
			for j, side := range sides {
				r, err := side()
				if err != nil {
					return err
				}
				if (j == 0) == (i%2 == 0) {
					oursRuns = append(oursRuns, r)
				} else {
					theirsRuns = append(theirsRuns, r)
				}
			}
		}
		ours, theirs := medianOf(oursRuns), medianOf(theirsRuns)
		fmt.Fprintf(&b, "| %s: sink/dir vs `git archive \\| tar -x` | %s / %d MiB | %s / %d MiB | %.2f | ≤ 1.0 |\n", layout.name,
			ours.Wall.Round(1e6), ours.RSS>>10, theirs.Wall.Round(1e6), theirs.RSS>>10, float64(ours.Wall)/float64(theirs.Wall))
		fmt.Fprintf(os.Stderr, "%s done\n", layout.name)
		if err := worktreeRow(&b, env, repo.BareDir(), commit, layout.name, runs); err != nil {
			return err
		}
	}
	return harness.Publish(b.String(), out)
}

// worktreeRow measures examples/gitsync publishing the commit as git-sync
// does (a git worktree at root/.worktrees/<hash>, --one-time, its mirror
// warm, a fresh root each run, a file:// remote) against git's own
// `git worktree add --detach` of the same commit from the repository,
// each in a process of its own, taking turns going first.
func worktreeRow(b *strings.Builder, env *gittest.Standalone, bare, commit, layout string, runs int) error {
	bin := filepath.Join(env.TempDir(), "gitsync")
	if out, err := exec.Command("go", "build", "-o", bin, "./examples/gitsync").CombinedOutput(); err != nil {
		return fmt.Errorf("building examples/gitsync: %v: %s", err, out)
	}
	cache := filepath.Join(env.TempDir(), "cache")
	args := func(root string) []string {
		return []string{bin, "-v=-4", "--one-time", "--repo", "file://" + bare, "--root", root, "--cache-dir", cache, "--link", "link"}
	}
	if out, err := exec.Command(args(env.TempDir())[0], args(env.TempDir())[1:]...).CombinedOutput(); err != nil { // warms the mirror
		return fmt.Errorf("gitsync: %v: %s", err, out)
	}
	ours := func() (harness.Result, error) {
		return harness.Measure(1, func() []string {
			_ = exec.Command("sync").Run()
			return args(env.TempDir())
		})
	}
	theirs := func() (harness.Result, error) {
		return harness.Measure(1, func() []string {
			_ = exec.Command("git", "--git-dir", bare, "worktree", "prune").Run()
			_ = exec.Command("sync").Run()
			return []string{"git", "--git-dir", bare, "worktree", "add", "-q", "--detach", filepath.Join(env.TempDir(), "wt"), commit}
		})
	}
	var oursRuns, theirsRuns []harness.Result
	for i := range runs {
		first, second := ours, theirs
		if i%2 == 1 {
			first, second = theirs, ours
		}
		r1, err := first()
		if err != nil {
			return err
		}
		r2, err := second()
		if err != nil {
			return err
		}
		if i%2 == 1 {
			r1, r2 = r2, r1
		}
		oursRuns, theirsRuns = append(oursRuns, r1), append(theirsRuns, r2)
	}
	o, t := medianOf(oursRuns), medianOf(theirsRuns)
	fmt.Fprintf(b, "| %s: examples/gitsync's worktree vs `git worktree add --detach` | %s / %d MiB | %s / %d MiB | %.2f | ≤ 1.0 |\n", layout,
		o.Wall.Round(1e6), o.RSS>>10, t.Wall.Round(1e6), t.RSS>>10, float64(o.Wall)/float64(t.Wall))
	return nil
}

// medianOf takes the median wall time and peak RSS of results.
func medianOf(rs []harness.Result) harness.Result {
	walls := make([]time.Duration, len(rs))
	rss := make([]int64, len(rs))
	for i, r := range rs {
		walls[i], rss[i] = r.Wall, r.RSS
	}
	slices.Sort(walls)
	slices.Sort(rss)
	return harness.Result{Wall: walls[len(walls)/2], RSS: rss[len(rss)/2]}
}

func hundred() []string {
	out := make([]string, 100)
	for i := range out {
		out[i] = fmt.Sprintf("d%02d", i)
	}
	return out
}
