// Command coldfetch measures the first fetch of a large repository into an
// empty mirror, go-git (through mirror.Mirror) against the git CLI, full
// and shallow, and the incremental fetch of one new commit after it. Each
// fetch runs in its own process so that its peak memory (max RSS) is its
// own. It prints a markdown table; every figure is also given as a ratio to
// `git clone --bare` measured in the same run.
//
//	go run ./internal/dev/bench/coldfetch -commits 10000 -files 10000
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
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/bench/harness"
	"github.com/modwatch/modwatch/internal/dev/gittest"
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
	dirs := flag.Int("dirs", 1, "top-level directories the files are spread over")
	partialPath := flag.String("partial", "", "internal: make -child's mirror partial and fetch this path's files")
	flag.Parse()
	if *child != "" {
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err == nil && pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile()
			}
		}
		fetch := func() error { return fetchChild(*child, *dir, *depth, *cli) }
		if *partialPath != "" {
			fetch = func() error { return partialChild(*child, *dir, *partialPath) }
		}
		if err := fetch(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			pprof.StopCPUProfile()
			os.Exit(1)
		}
		return
	}
	if err := run(*commits, *files, *size, *runs, *dirs); err != nil {
		fmt.Fprintln(os.Stderr, "coldfetch:", err)
		os.Exit(1)
	}
}

func fetchChild(url, dir string, depth int, cli bool) error {
	opts := mirror.Options{FirstFetchDepth: depth}
	if cli {
		opts.GitCLI = "git"
	}
	m, err := mirror.Open(dir, url, opts)
	if err != nil {
		return err
	}
	_, err = m.Fetch(context.Background(), nil, []string{"refs/heads/main"})
	return err
}

// partialChild fetches into a partial mirror what a watcher of one path
// does: the branch's commits and trees, then the path's files.
func partialChild(url, dir, path string) error {
	m, err := mirror.Open(dir, url, mirror.Options{GitCLI: "git", Partial: true})
	if err != nil {
		return err
	}
	ctx := context.Background()
	refs, err := gitutil.ListRefs(ctx, url, nil, []string{"refs/heads/main"})
	if err != nil {
		return err
	}
	res, err := m.FetchListed(ctx, nil, map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"]})
	if err != nil {
		return err
	}
	if !m.Partial() {
		return fmt.Errorf("the mirror is not partial")
	}
	return m.FetchPaths(ctx, nil, res.Refs["refs/heads/main"], []string{path})
}

func run(commits, files, size, runs, ndirs int) (err error) {
	env := &gittest.Standalone{}
	defer env.Close()
	defer env.Recover(&err)

	srv := gittest.NewServer(env)
	repo := srv.NewRepo(env, "bench/big")
	start := time.Now()
	dirs := []string{"f"}
	if ndirs > 1 {
		dirs = nil
		for i := range ndirs {
			dirs = append(dirs, fmt.Sprintf("d%03d", i))
		}
	}
	if err := harness.Generate(repo.BareDir(), commits, files, size, dirs); err != nil {
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
	// A partial mirror of one directory, where the server allows filters,
	// against git clone --bare of the same repository: time, and the bytes
	// the server sent (its answers' bodies), per run.
	sent := func() int64 { return repo.Counts().FetchBytes.Load() + repo.Counts().ListBytes.Load() }
	var cloneBytes, partialBytes int64
	before := sent()
	if err := add("git clone --bare (bytes baseline)", func() []string { return []string{"git", "clone", "-q", "--bare", url, fresh()} }); err != nil {
		return err
	}
	cloneBytes = (sent() - before) / int64(runs)
	before = sent()
	if err := add(fmt.Sprintf("partial mirror, files of %s/ only", dirs[0]), func() []string {
		return []string{self, "-child", url, "-dir", fresh(), "-partial", dirs[0]}
	}); err != nil {
		return err
	}
	partialBytes = (sent() - before) / int64(runs)

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
	var cloneWall, partialWall time.Duration
	for _, r := range rows {
		switch {
		case r.name == "git clone --bare (bytes baseline)":
			cloneWall = r.res.Wall
		case strings.HasPrefix(r.name, "partial mirror"):
			partialWall = r.res.Wall
		}
	}
	fmt.Printf("\nA partial mirror of %s/ (1 of %d directories), against git clone --bare in the same run: %s vs %s (%.2f×), %.1f MiB vs %.1f MiB sent by the server (%.2f×)\n",
		dirs[0], len(dirs), partialWall.Round(time.Millisecond), cloneWall.Round(time.Millisecond), float64(partialWall)/float64(cloneWall),
		float64(partialBytes)/(1<<20), float64(cloneBytes)/(1<<20), float64(partialBytes)/float64(cloneBytes))
	fmt.Printf("\nCold first fetch of %d commits × %d files (%.0f MiB packed), median of %d runs, on this machine:\n\n", commits, files, float64(packSize)/(1<<20), runs)
	fmt.Println("| fetch | wall time | × git clone --bare | peak RSS | × git clone --bare |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %.2f | %.0f MiB | %.2f |\n", r.name, r.res.Wall.Round(time.Millisecond),
			float64(r.res.Wall)/float64(base.Wall), float64(r.res.RSS)/1024, float64(r.res.RSS)/float64(base.RSS))
	}
	return nil
}
