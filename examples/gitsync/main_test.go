package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/internal/gittest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, gittest.LeakOptions...) }

func noEnv(string) string { return "" }

func TestFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{"GITSYNC_REPO": "https://git.example.com/g/app.git", "GITSYNC_ROOT": "/git", "GITSYNC_PERIOD": "30s", "GITSYNC_ONE_TIME": "true"}
	c, err := parse([]string{"--period", "5s", "--link", "/git/current"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "https://git.example.com/g/app.git", c.repo)
	assert.Equal(t, 5*time.Second, c.period, "the command line wins over the environment")
	assert.True(t, c.oneTime)
	assert.Equal(t, "current", c.link, "an absolute link under root")

	c, err = parse([]string{"--repo", "https://git.example.com/g/app.git", "--root", "/git"}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "app", c.link, "the repository's name by default")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--root", "/git"}, "--repo"},
		{[]string{"--repo", "r"}, "--root"},
		{[]string{"--repo", "r", "--root", "/git", "--git-gc", "auto"}, "flag provided but not defined: -git-gc"},
		{[]string{"--repo", "r", "--root", "/git", "--link", "/elsewhere/x"}, "not under --root"},
		{[]string{"--repo", "r", "--root", "/git", "--link", "a/b"}, "one entry"},
	} {
		_, err := parse(tc.args, noEnv, &bytes.Buffer{})
		assert.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
	var out bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"--bogus"}, noEnv, &out))
	assert.Contains(t, out.String(), "flag provided but not defined: -bogus")
}

// A consumer written against git-sync's contract — read root/link, wait
// for the link to change — works unchanged across commits, a force-push
// and a server outage.
func TestConsumerContract(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	base := repo.Commit(t, "0", gittest.File("version", "0"))
	root := t.TempDir()
	consumerLog := filepath.Join(t.TempDir(), "seen")
	hookLog := filepath.Join(t.TempDir(), "hook")

	// The exechook runs in the new tree, after the link moved.
	hookScript := filepath.Join(t.TempDir(), "hook.sh")
	script := "#!/bin/sh\n" + `[ "$(cat version)" = "$(cat "$ROOT/current/version")" ] && echo "$(cat version)" >> "$HOOK_LOG"` + "\n"
	require.NoError(t, os.WriteFile(hookScript, []byte(script), 0o755))
	t.Setenv("ROOT", root)
	t.Setenv("HOOK_LOG", hookLog)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		done <- run(ctx, []string{"--repo", repo.URL(), "--root", root, "--link", "current", "--period", "100ms",
			"--max-failures", "-1", "--exechook-command", hookScript, "--exechook-timeout", "10s"}, noEnv, &stderr)
	}()
	// The consumer: git-sync's documented loop, in shell.
	consumer := exec.Command("sh", "-c", `
		last=""
		while true; do
			now=$(readlink "$ROOT/current" 2>/dev/null)
			if [ -n "$now" ] && [ "$now" != "$last" ]; then
				echo "$(cat "$ROOT/current/version")" >> "$LOG"
				last=$now
			fi
			sleep 0.02
		done`)
	consumer.Env = append(os.Environ(), "ROOT="+root, "LOG="+consumerLog)
	require.NoError(t, consumer.Start())
	defer func() { _ = consumer.Process.Kill(); _ = consumer.Wait() }()

	seen := func(want ...string) {
		t.Helper()
		require.Eventually(t, func() bool {
			data, _ := os.ReadFile(consumerLog)
			return strings.Join(strings.Fields(string(data)), " ") == strings.Join(want, " ")
		}, 30*time.Second, 20*time.Millisecond, "the consumer saw %v", want)
	}
	seen("0")
	repo.Commit(t, "1", gittest.File("version", "1"))
	seen("0", "1")
	repo.Commit(t, "2", gittest.File("version", "2"))
	seen("0", "1", "2")
	repo.Reset(t, base)
	repo.Commit(t, "rewritten", gittest.File("version", "3"))
	seen("0", "1", "2", "3")
	srv.SetDown(true)
	time.Sleep(500 * time.Millisecond) // a few failed polls
	srv.SetDown(false)
	repo.Commit(t, "4", gittest.File("version", "4"))
	seen("0", "1", "2", "3", "4")
	// The hook runs after the link moved: it may still be running.
	require.Eventually(t, func() bool {
		hooked, _ := os.ReadFile(hookLog)
		return strings.Join(strings.Fields(string(hooked)), " ") == "0 1 2 3 4"
	}, 30*time.Second, 20*time.Millisecond, "one hook per sync, each run in its own tree, after the link moved")

	cancel()
	assert.Equal(t, 0, <-done, stderr.String())
	entries, err := os.ReadDir(filepath.Join(root, ".trees"))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "old trees are removed")
}

// --one-time exits 0 after the first sync, and non-zero when it fails.
func TestOneTime(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("version", "0"))
	root := t.TempDir()
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--repo", repo.URL(), "--root", root, "--one-time"}, noEnv, &stderr)
	require.Equal(t, 0, code, stderr.String())
	data, err := os.ReadFile(filepath.Join(root, "app", "version"))
	require.NoError(t, err)
	assert.Equal(t, "0", string(data))

	stderr.Reset()
	code = run(context.Background(), []string{"--repo", repo.URL(), "--root", t.TempDir(), "--ref", "missing", "--one-time"}, noEnv, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "consecutive failures")
}

// syncBuffer is a bytes.Buffer safe for the program's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
