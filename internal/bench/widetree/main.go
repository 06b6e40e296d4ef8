// Command widetree measures publishing a wide tree with sink/dir from a
// mirror's fs.FS against git archive | tar -x of the same commit, each in a
// process of its own (wall time and peak RSS, medians), on a repository of
// 10,000 files in one directory and one of 10,000 files over 100
// directories; it prints a markdown table.
//
//	go run ./internal/bench/widetree -out bench-results/widetree.md
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/bench/harness"
	"github.com/modwatch/modwatch/internal/gittest"
	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/watcher"
)

func main() {
	files := flag.Int("files", 10000, "files per repository")
	runs := flag.Int("runs", 3, "runs per measurement (medians are reported)")
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
func publish(mirror, commit, root string) error {
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
	m, err := gitutil.OpenMirror(mirror, "https://example.invalid/r.git", gitutil.MirrorOptions{})
	if err != nil {
		return err
	}
	fsys, err := m.FS(plumbing.NewHash(commit), "")
	if err != nil {
		return err
	}
	return dir.New(root).Deliver(context.Background(), watcher.Change{Target: watcher.Target{ID: "t"}, To: commit, FS: fsys})
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
	b.WriteString("| layout | modwatch: wall / peak RSS | git archive \\| tar -x: wall / peak RSS | wall ratio | goal |\n|---|---|---|---|---|\n")
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
		mirror := filepath.Join(env.TempDir(), "mirror")
		m, err := gitutil.OpenMirror(mirror, repo.URL(), gitutil.MirrorOptions{GitCLI: "git"})
		if err != nil {
			return err
		}
		if _, err := m.Fetch(context.Background(), nil, []string{"refs/heads/main"}); err != nil {
			return err
		}
		// Each run starts with the page cache written back (sync), so that
		// neither side pays for the other's writes.
		ours, err := harness.Measure(runs, func() []string {
			_ = exec.Command("sync").Run()
			return []string{self, "-child", mirror, "-commit", commit, "-root", env.TempDir()}
		})
		if err != nil {
			return err
		}
		// Into the same place sink/dir writes (root/.trees/<tree>): where a
		// directory sits decides how ext4 allocates its inodes, and that
		// can cost either side more than everything else.
		theirs, err := harness.Measure(runs, func() []string {
			_ = exec.Command("sync").Run()
			into := filepath.Join(env.TempDir(), ".trees", "tree")
			if err := os.MkdirAll(into, 0o755); err != nil {
				panic(err)
			}
			return []string{"sh", "-c", `git --git-dir="$1" archive "$2" | tar -x -C "$3"`, "sh", mirror, commit, into}
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "| %s | %s / %d MiB | %s / %d MiB | %.2f | ≤ 1.0 |\n", layout.name,
			ours.Wall.Round(1e6), ours.RSS>>10, theirs.Wall.Round(1e6), theirs.RSS>>10, float64(ours.Wall)/float64(theirs.Wall))
		fmt.Fprintf(os.Stderr, "%s done\n", layout.name)
	}
	fmt.Print(b.String())
	if out != "" {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, []byte(b.String()), 0o644)
	}
	return nil
}

func hundred() []string {
	out := make([]string, 100)
	for i := range out {
		out[i] = fmt.Sprintf("d%02d", i)
	}
	return out
}
