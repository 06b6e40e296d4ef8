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
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/modwatch/modwatch/gitutil"
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

type result struct {
	wall time.Duration
	rss  int64 // KiB
}

// measure runs the command that prep returns (prep makes a fresh
// directory each time) runs times and returns the medians. Peak memory comes
// from GNU time when it is installed: the rusage of a child started
// directly from this process also counts this process's own memory, which
// the child shares until it execs.
func measure(runs int, prep func() []string) (result, error) {
	var walls []time.Duration
	var rsss []int64
	timeBin, _ := exec.LookPath("/usr/bin/time")
	rssFile := filepath.Join(os.TempDir(), fmt.Sprintf("coldfetch-rss-%d", os.Getpid()))
	defer os.Remove(rssFile)
	for range runs {
		args := prep()
		if timeBin != "" {
			args = append([]string{timeBin, "-f", "%M", "-o", rssFile}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stderr = os.Stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return result{}, fmt.Errorf("%s: %w", strings.Join(args, " "), err)
		}
		walls = append(walls, time.Since(start))
		rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
		if timeBin != "" {
			data, err := os.ReadFile(rssFile)
			if err != nil {
				return result{}, err
			}
			if _, err := fmt.Sscan(strings.TrimSpace(string(data)), &rss); err != nil {
				return result{}, fmt.Errorf("GNU time output %q: %w", data, err)
			}
		}
		rsss = append(rsss, rss)
	}
	slices.Sort(walls)
	slices.Sort(rsss)
	return result{wall: walls[len(walls)/2], rss: rsss[len(rsss)/2]}, nil
}

func run(commits, files, size, runs int) (err error) {
	env := &gittest.Standalone{}
	defer env.Close()
	defer env.Recover(&err)

	srv := gittest.NewServer(env)
	repo := srv.NewRepo(env, "bench/big")
	start := time.Now()
	if err := generate(repo.BareDir(), commits, files, size); err != nil {
		return err
	}
	packSize, err := dirSize(filepath.Join(repo.BareDir(), "objects"))
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
		res  result
	}
	var rows []row
	add := func(name string, prep func() []string) error {
		res, err := measure(runs, prep)
		if err != nil {
			return err
		}
		rows = append(rows, row{name, res})
		fmt.Fprintf(os.Stderr, "%-40s %8s %8d KiB\n", name, res.wall.Round(time.Millisecond), res.rss)
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
		fmt.Printf("| %s | %s | %.2f | %.0f MiB | %.2f |\n", r.name, r.res.wall.Round(time.Millisecond),
			float64(r.res.wall)/float64(base.wall), float64(r.res.rss)/1024, float64(r.res.rss)/float64(base.rss))
	}
	return nil
}

// generate fills the bare repository with commits through git fast-import:
// the first commit adds every file, each later one rewrites three.
func generate(bare string, commits, files, size int) error {
	cmd := exec.Command("git", "fast-import", "--quiet")
	cmd.Env = append(os.Environ(), "GIT_DIR="+bare)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	w := bufio.NewWriterSize(in, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n"
	content := func() []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return b
	}
	ts := int64(1_700_000_000)
	for c := range commits {
		msg := fmt.Sprintf("commit %d", c)
		fmt.Fprintf(w, "commit refs/heads/main\ncommitter Bench <bench@example.com> %d +0000\ndata %d\n%s\n", ts+int64(c), len(msg), msg)
		touch := []int{rng.IntN(files), rng.IntN(files), rng.IntN(files)}
		if c == 0 {
			touch = make([]int, files)
			for i := range touch {
				touch[i] = i
			}
		}
		for _, f := range touch {
			data := content()
			fmt.Fprintf(w, "M 100644 inline f/%05d\ndata %d\n", f, len(data))
			w.Write(data)
			w.WriteString("\n")
		}
		w.WriteString("\n")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := in.Close(); err != nil {
		return err
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git fast-import: %w", err)
	}
	out, err := exec.Command("git", "--git-dir", bare, "repack", "-adq").CombinedOutput()
	if err != nil {
		return fmt.Errorf("git repack: %v: %s", err, out)
	}
	return nil
}

func dirSize(dir string) (int64, error) {
	var total int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			total += fi.Size()
		}
		return err
	})
	return total, err
}
