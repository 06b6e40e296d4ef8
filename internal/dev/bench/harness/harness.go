// Package harness holds what the benchmark programs share: a generator of
// large repositories and a measurement of commands in their own processes.
package harness

import (
	"bufio"
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
)

// Result is what one measurement found: medians of wall time and peak
// resident memory.
type Result struct {
	Wall time.Duration
	RSS  int64 // KiB
}

// Measure runs the command that prep returns (prep makes a fresh
// directory each time) runs times and returns the medians. Peak memory comes
// from GNU time when it is installed: the rusage of a child started
// directly from this process also counts this process's own memory, which
// the child shares until it execs.
func Measure(runs int, prep func() []string) (Result, error) {
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
			return Result{}, fmt.Errorf("%s: %w", strings.Join(args, " "), err)
		}
		walls = append(walls, time.Since(start))
		rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
		if timeBin != "" {
			data, err := os.ReadFile(rssFile)
			if err != nil {
				return Result{}, err
			}
			if _, err := fmt.Sscan(strings.TrimSpace(string(data)), &rss); err != nil {
				return Result{}, fmt.Errorf("GNU time output %q: %w", data, err)
			}
		}
		rsss = append(rsss, rss)
	}
	slices.Sort(walls)
	slices.Sort(rsss)
	return Result{Wall: walls[len(walls)/2], RSS: rsss[len(rsss)/2]}, nil
}

// Generate fills the bare repository with commits through git fast-import:
// the first commit adds every file (spread over dirs, "<dir>/<n>"), each
// later one rewrites three.
func Generate(bare string, commits, files, size int, dirs []string) error {
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
			fmt.Fprintf(w, "M 100644 inline %s/%05d\ndata %d\n", dirs[f%len(dirs)], f, len(data))
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

// DirSize is the total size of the files under dir.
func DirSize(dir string) (int64, error) {
	var total int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			total += fi.Size()
		}
		return err
	})
	return total, err
}

// Row is one line of a comparison table: a figure beside its baseline from
// the same run.
type Row struct{ ID, What, Ours, Base, Ratio, Goal string }

// NewRow is a Row, field by field.
func NewRow(id, what, ours, base, ratio, goal string) Row {
	return Row{ID: id, What: what, Ours: ours, Base: base, Ratio: ratio, Goal: goal}
}

// PrintTable prints rows as a markdown table, and writes it to out too
// when out is set.
func PrintTable(rows []Row, out string) error {
	var b strings.Builder
	b.WriteString("| | measure | modwatch | baseline (same run) | ratio | goal |\n|---|---|---:|---:|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.ID, r.What, r.Ours, r.Base, r.Ratio, r.Goal)
	}
	return Publish(b.String(), out)
}

// Publish prints a table, and writes it to out too when out is set.
func Publish(table, out string) error {
	fmt.Print(table)
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, []byte(table), 0o644)
}

// Profile writes a CPU profile to prefix.cpu until stop, and a heap
// profile (in-use and allocations) to prefix.heap at stop.
func Profile(prefix string) (stop func(), err error) {
	cpu, err := os.Create(prefix + ".cpu")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		cpu.Close()
		if heap, err := os.Create(prefix + ".heap"); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(heap, 0)
			heap.Close()
		}
	}, nil
}
