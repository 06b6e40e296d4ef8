package hook_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/sink/hook"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// procs are the processes a hook's script started: each appends its PID
// to $PIDS, the hook itself first. Whatever the code under test did, the
// test kills them all, and their groups, when it ends.
type procs struct{ file string }

func newProcs(t *testing.T) procs {
	p := procs{file: filepath.Join(t.TempDir(), "pids")}
	t.Setenv("PIDS", p.file)
	t.Cleanup(func() {
		for _, pid := range p.list(t) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return p
}

func (p procs) list(t *testing.T) []int {
	data, err := os.ReadFile(p.file)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

// requireGone waits until none of the n processes the hook recorded runs,
// nor any other of the hook's group (a zombie whose parent is gone does
// not run: it is only not reaped yet).
func (p procs) requireGone(t *testing.T, n int) {
	t.Helper()
	pids := p.list(t)
	require.Len(t, pids, n, "the processes the hook recorded")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var left []int
		for _, pid := range pids {
			if running(pid) {
				left = append(left, pid)
			}
		}
		assert.Empty(c, left, "recorded processes still running")
		assert.Empty(c, groupMembers(t, pids[0]), "processes of the hook's group still running")
	}, 30*time.Second, 10*time.Millisecond)
}

// stat is a process's state and process group, from /proc.
func stat(pid string) (state string, pgid int, ok bool) {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "", 0, false
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 3 {
		return "", 0, false
	}
	pgid, err = strconv.Atoi(f[2])
	return f[0], pgid, err == nil
}

func running(pid int) bool {
	state, _, ok := stat(strconv.Itoa(pid))
	return ok && state != "Z" && state != "X"
}

func groupMembers(t *testing.T, pgid int) []int {
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var members []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, g, ok := stat(e.Name()); ok && g == pgid && state != "Z" && state != "X" {
			members = append(members, pid)
		}
	}
	return members
}

// joinGroupEnv makes the test binary the hook joinGroup is.
const joinGroupEnv = "MODWATCH_HOOK_TEST_JOIN_GROUP"

// joinGroup is a hook that leaves its process group for another of its
// session, pgid, records its PID in $PIDS and runs on.
func joinGroup(pgid string) {
	g, err := strconv.Atoi(pgid)
	if err == nil {
		err = syscall.Setpgid(0, g)
	}
	if err == nil {
		err = appendLine(os.Getenv("PIDS"), strconv.Itoa(os.Getpid()))
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	fmt.Println("joined", g)
	time.Sleep(10 * time.Minute) // as sleep 600
}

func appendLine(name, line string) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	return errors.Join(err, f.Close())
}

// captureLog is a logger at V(1) and what it was told.
func captureLog() (logr.Logger, func() string) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{Verbosity: 1})
	return log, func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(lines, "\n")
	}
}

// A hook that exits 0 and leaves a child holding its output is delivered,
// once, and the child does not outlive it: the watcher neither waits for
// the child nor runs the hook again (each run left one more orphan).
func TestExecBackgroundChildRunsOnce(t *testing.T) {
	p := newProcs(t)
	runs := filepath.Join(t.TempDir(), "runs")
	t.Setenv("RUNS", runs)
	script := `echo $$ >> "$PIDS"; echo run >> "$RUNS"; sleep 600 & echo $! >> "$PIDS"; echo started`
	git := watchertest.NewGit()
	remote := git.Remote("https://git.example/team/app.git")
	commit := remote.Commit(t, map[string]string{"app.yaml": "a: 1\n"})
	obs := watchertest.NewObserver()
	w := watchertest.NewWatcher(t, watcher.WithGit(git), watcher.WithInterval(time.Hour), watcher.WithObserver(obs))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "app", URL: remote.URL()}), hook.Command("sh", []string{"-c", script})))
	watchertest.Run(t, w.Run)
	obs.WaitFor(t, "the hook's delivery", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Commit == commit
	})
	data, err := os.ReadFile(runs)
	require.NoError(t, err)
	assert.Equal(t, "run\n", string(data), "the hook ran once")
	assert.Zero(t, obs.Count(watchertest.Is(watcher.EventDeliveryFailed, "app")))
	p.requireGone(t, 2)
}

// Whatever a hook leaves running when it exits, in whatever way it holds
// (or not) the hook's output, the hook's own exit status is the run's,
// given at once, and what it left is killed.
func TestExecLeftovers(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		procs        int
		err          string // "" for success
	}{
		{"a child holds stdout", `sleep 600 & echo $! >> "$PIDS"`, 2, ""},
		{"a child holds stderr only", `sleep 600 >/dev/null & echo $! >> "$PIDS"`, 2, ""},
		{"a child holds no output", `sleep 600 >/dev/null 2>&1 & echo $! >> "$PIDS"`, 2, ""},
		{"an orphaned grandchild holds stdout", `sh -c 'sleep 600 & echo $! >> "$PIDS"'`, 2, ""},
		{"a child ignores SIGTERM and SIGHUP", `(trap "" TERM HUP INT; sleep 600 & echo $! >> "$PIDS"; wait) & echo $! >> "$PIDS"
			while [ "$(wc -l < "$PIDS")" -lt 3 ]; do sleep 0.01; done`, 3, ""},
		{"the hook fails", `sleep 600 & echo $! >> "$PIDS"; echo broken >&2; exit 3`, 2, "exit status 3: hook output\nbroken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProcs(t)
			log, logged := captureLog()
			script := `echo $$ >> "$PIDS"; echo hook output; ` + tc.script
			err := hook.Command("sh", []string{"-c", script}, hook.WithExecTimeout(time.Hour)).
				Deliver(logr.NewContext(context.Background(), log), change)
			if tc.err == "" {
				require.NoError(t, err)
				assert.Contains(t, logged(), "hook output")
			} else {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
			}
			p.requireGone(t, tc.procs)
		})
	}
}

// A script that starts a child (which ignores SIGTERM), a grandchild,
// and a grandchild whose parent exited, then writes "$READY".
const family = `echo $$ >> "$PIDS"
sleep 600 & echo $! >> "$PIDS"
sh -c 'sleep 600 & echo $! >> "$PIDS"; exec sleep 600' & echo $! >> "$PIDS"
sh -c 'sleep 600 & echo $! >> "$PIDS"'
(trap "" TERM HUP INT; sleep 600 & echo $! >> "$PIDS"; wait) & echo $! >> "$PIDS"
while [ "$(wc -l < "$PIDS")" -lt 7 ]; do sleep 0.01; done
echo ready; touch "$READY"
exec sleep 600`

// A hook past its timeout is killed with all it started, grandchildren
// too.
func TestExecTimeoutKillsTheGroup(t *testing.T) {
	p := newProcs(t)
	t.Setenv("READY", filepath.Join(t.TempDir(), "ready"))
	err := hook.Command("sh", []string{"-c", family}, hook.WithExecTimeout(3*time.Second)).Deliver(context.Background(), change)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "timed out after 3s")
	assert.Contains(t, err.Error(), "ready", "the output before the kill")
	p.requireGone(t, 7)
}

// The end of the delivery's context kills the hook with all it started;
// the error says why.
func TestExecCancelKillsTheGroup(t *testing.T) {
	p := newProcs(t)
	ready := filepath.Join(t.TempDir(), "ready")
	t.Setenv("READY", ready)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- hook.Command("sh", []string{"-c", family}).Deliver(ctx, change) }()
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 30*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("Deliver did not return after its context ended")
	}
	p.requireGone(t, 7)
}

// A hook that writes a lot: what it writes takes no memory, little disk
// (its file is cut while it runs) and no name in the temporary directory;
// its error holds its last 4 KiB.
func TestExecHugeOutput(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	script := `[ -z "$(ls -A "$TMPDIR")" ] || { echo "named output: $(ls -A "$TMPDIR")"; exit 9; }
		head -c 67108864 /dev/zero | tr '\0' x
		while [ "$(stat -L -c %s /proc/$$/fd/1)" -gt 2097152 ]; do sleep 0.01; done
		echo; echo the end; exit 3`
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := hook.Command("sh", []string{"-c", script}).Deliver(context.Background(), change)
	runtime.ReadMemStats(&after)
	require.Error(t, err)
	msg := err.Error()
	assert.True(t, strings.Contains(msg, "exit status 3"), "the hook's own failure: %.200q", msg)
	assert.True(t, strings.HasSuffix(msg, "xxxx\nthe end"), "the output's tail: %.200q", msg[max(len(msg)-200, 0):])
	assert.Less(t, len(msg), 4<<10+200, "the output kept is its last 4 KiB")
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8<<20), "the output was not read into memory")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "no output file is left")
}

// A hook that closes its output and goes on runs until it exits: the run
// is the hook's life, not its output's. What it wrote before is kept.
func TestExecClosedOutput(t *testing.T) {
	p := newProcs(t)
	dir := t.TempDir()
	ready, goOn, mark := filepath.Join(dir, "ready"), filepath.Join(dir, "go"), filepath.Join(dir, "mark")
	t.Setenv("READY", ready)
	t.Setenv("GO", goOn)
	t.Setenv("MARK", mark)
	script := `echo $$ >> "$PIDS"; echo before
		exec >&- 2>&-
		sleep 600 & echo $! >> "$PIDS"
		touch "$READY"
		while [ ! -e "$GO" ]; do sleep 0.01; done
		echo exited > "$MARK"`
	log, logged := captureLog()
	done := make(chan error, 1)
	go func() {
		done <- hook.Command("sh", []string{"-c", script}).Deliver(logr.NewContext(context.Background(), log), change)
	}()
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 30*time.Second, 10*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Deliver returned while the hook ran: %v", err)
	default:
	}
	require.NoError(t, os.WriteFile(goOn, nil, 0o600))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Deliver did not return after the hook exited")
	}
	data, err := os.ReadFile(mark)
	require.NoError(t, err, "Deliver returned after the hook's exit")
	assert.Equal(t, "exited\n", string(data))
	assert.Contains(t, logged(), "before")
	p.requireGone(t, 2)
}

// A child that left the hook's process group (a session of its own) is
// out of the hook's reach; it holds the hook's output, and neither holds
// the run.
func TestExecChildOfItsOwnSession(t *testing.T) {
	newProcs(t)
	log, logged := captureLog()
	script := `setsid sh -c 'echo $$ >> "$PIDS"; exec sleep 600' &
		while [ ! -s "$PIDS" ]; do sleep 0.01; done
		echo hook done`
	err := hook.Command("sh", []string{"-c", script}, hook.WithExecTimeout(time.Hour)).
		Deliver(logr.NewContext(context.Background(), log), change)
	require.NoError(t, err)
	assert.Contains(t, logged(), "hook done")
}

// A hook that leaves its own process group (for another of its session)
// is out of the group's kill, and still killed on its timeout.
func TestExecLeaderLeavesItsGroup(t *testing.T) {
	p := newProcs(t)
	t.Setenv(joinGroupEnv, strconv.Itoa(syscall.Getpgrp()))
	done := make(chan error, 1)
	go func() {
		done <- hook.Command(os.Args[0], nil, hook.WithExecTimeout(5*time.Second)).Deliver(context.Background(), change)
	}()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "timed out after 5s")
		assert.Contains(t, err.Error(), "joined")
	case <-time.After(60 * time.Second):
		t.Fatal("Deliver did not return after the hook's timeout")
	}
	p.requireGone(t, 1)
}

// With no temporary directory to write to (a read-only root file system),
// a hook still runs; its error says its output was not kept.
func TestExecWithoutTempDir(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	out := filepath.Join(t.TempDir(), "ran")
	t.Setenv("OUT", out)
	require.NoError(t, hook.Command("sh", []string{"-c", `echo ran > "$OUT"`}).Deliver(context.Background(), change))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "ran\n", string(data))

	err = hook.Command("sh", []string{"-c", "echo broken; exit 3"}).Deliver(context.Background(), change)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exit status 3")
	assert.Contains(t, err.Error(), "output not kept")
}
