// Command coldfetch measures the first fetch of a large repository into an
// empty mirror, go-git (through gitutil.Mirror) against the git CLI, full
// and shallow, and the incremental fetch of one new commit after it. Each
// fetch runs in its own process so that its peak memory (max RSS) is its
// own. It prints a markdown table; every figure is also given as a ratio to
// `git clone --bare` measured in the same run.
//
//	go run ./internal/bench/coldfetch -commits 10000 -files 10000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/bench/harness"
	"github.com/modwatch/modwatch/internal/gittest"
)

func main() {
	child := flag.String("child", "", "internal: run one go-git fetch (url) into -dir")
	dir := flag.String("dir", "", "internal: mirror directory for -child")
	depth := flag.Int("depth", 0, "internal: first fetch depth for -child")
	cli := flag.Bool("cli", false, "internal: let -child make its first fetch with the git CLI")
	cpuProfile := flag.String("cpuprofile", "", "internal: write -child's CPU profile here")
	commits := flag.Int("commits", 10000, "commits in the generated repository")
	files := flag.Int("files", 10000, "files in the generated repository")
	size := flag.Int("size", 4096, "bytes per file")
	runs := flag.Int("runs", 3, "runs per measurement (the median is reported)")
	flag.Parse()
	if *child != "" {
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err == nil && pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile()
			}
		}
		if err := fetchChild(*child, *dir, *depth, *cli); err != nil {
			fmt.Fprintln(os.Stderr, err)
			pprof.StopCPUProfile()
			os.Exit(1)
		}
		return
	}
	if err := run(*commits, *files, *size, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "coldfetch:", err)
		os.Exit(1)
	}
}

func fetchChild(url, dir string, depth int, cli bool) error {
	opts := gitutil.MirrorOptions{FirstFetchDepth: depth}
	if cli {
		opts.GitCLI = "git"
	}
	m, err := gitutil.OpenMirror(dir, url, opts)
	if err != nil {
		return err
	}
	_, err = m.Fetch(context.Background(), nil, []string{"refs/heads/main"})
	return err
}

func run(commits, files, size, runs int) (err error) {
	env := &gittest.Standalone{}
	defer env.Close()
	defer env.Recover(&err)

	srv := gittest.NewServer(env)
	repo := srv.NewRepo(env, "bench/big")
	start := time.Now()
	if err := harness.Generate(repo.BareDir(), commits, files, size, []string{"f"}); err != nil {
		return err
	}
	packSize, err := harness.DirSize(filepath.Join(repo.BareDir(), "objects"))
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "generated %d commits, %d files of %d bytes (%.0f MiB packed) in %s\n",
		commits, files, size, float64(packSize)/(1<<20), time.Since(start).Round(time.Second))

	self, err := os.Executable()
	if err != nil {
		return err
	}
	scratch := env.TempDir()
	n := 0
	fresh := func() string {
		n++
		return filepath.Join(scratch, fmt.Sprint(n))
	}
	type row struct {
		name string
		res  harness.Result
	}
	var rows []row
	add := func(name string, prep func() []string) error {
		res, err := harness.Measure(runs, prep)
		if err != nil {
			return err
		}
		rows = append(rows, row{name, res})
		fmt.Fprintf(os.Stderr, "%-40s %8s %8d KiB\n", name, res.Wall.Round(time.Millisecond), res.RSS)
		return nil
	}
	url := repo.URL()
	steps := []struct {
		name string
		prep func() []string
	}{
		{"git clone --bare (baseline)", func() []string { return []string{"git", "clone", "-q", "--bare", url, fresh()} }},
		{"git clone --bare --depth 1", func() []string { return []string{"git", "clone", "-q", "--bare", "--depth", "1", url, fresh()} }},
		{"git init --bare; git fetch", func() []string {
			d := fresh()
			return []string{"sh", "-c", `git init -q --bare "$1" && git -C "$1" fetch -q --no-tags "$2" +refs/heads/main:refs/heads/main`, "sh", d, url}
		}},
		{"go-git mirror, full history", func() []string { return []string{self, "-child", url, "-dir", fresh()} }},
		{"go-git mirror, depth 1", func() []string { return []string{self, "-child", url, "-dir", fresh(), "-depth", "1"} }},
		{"mirror, first fetch by git CLI (default)", func() []string { return []string{self, "-child", url, "-dir", fresh(), "-cli"} }},
	}
	for _, s := range steps {
		if err := add(s.name, s.prep); err != nil {
			return err
		}
	}

	// Incremental: one new commit touching one file, fetched into a mirror
	// made by each tool.
	repo.Git(env, "pull", "-q", "origin", "main")
	cliMirror, gogitMirror := fresh(), fresh()
	if out, err := exec.Command("git", "clone", "-q", "--bare", url, cliMirror).CombinedOutput(); err != nil {
		return fmt.Errorf("git clone: %v: %s", err, out)
	}
	if out, err := exec.Command(self, "-child", url, "-dir", gogitMirror, "-cli").CombinedOutput(); err != nil {
		return fmt.Errorf("go-git fetch: %v: %s", err, out)
	}
	i := 0
	bump := func() {
		i++
		repo.Commit(env, fmt.Sprint("bump ", i), gittest.File("f/00001", fmt.Sprint("bumped ", i, "\n")))
	}
	if err := add("git fetch, 1 new commit", func() []string {
		bump()
		return []string{"git", "-C", cliMirror, "fetch", "-q", url, "+refs/heads/main:refs/heads/main"}
	}); err != nil {
		return err
	}
	if err := add("go-git mirror fetch, 1 new commit", func() []string {
		bump()
		return []string{self, "-child", url, "-dir", gogitMirror}
	}); err != nil {
		return err
	}

	base := rows[0].res
	fmt.Printf("\nCold first fetch of %d commits × %d files (%.0f MiB packed), median of %d runs, on this machine:\n\n", commits, files, float64(packSize)/(1<<20), runs)
	fmt.Println("| fetch | wall time | × git clone --bare | peak RSS | × git clone --bare |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %.2f | %.0f MiB | %.2f |\n", r.name, r.res.Wall.Round(time.Millisecond),
			float64(r.res.Wall)/float64(base.Wall), float64(r.res.RSS)/1024, float64(r.res.RSS)/float64(base.RSS))
	}
	return nil
}
