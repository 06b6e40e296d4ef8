package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

func TestMain(m *testing.M) {
	// git runs the program (here, the test binary) as its credential
	// helper.
	if len(os.Args) > 1 && os.Args[1] == credentialHelperArg {
		os.Exit(credentialHelper(os.Args[2:], os.Stdin, os.Stdout, os.Getenv(credentialsEnv)))
	}
	goleak.VerifyTestMain(m, gittest.LeakOptions...)
}

var noEnv []string

func TestFlagsAndEnvironment(t *testing.T) {
	env := []string{"GITSYNC_REPO=https://git.example.com/g/app.git", "GITSYNC_ROOT=/git", "GITSYNC_PERIOD=30s", "GITSYNC_ONE_TIME=true", "GITSYNC_USERNAME=u", "GITSYNC_PASSWORD=pw", "HOME=/root"}
	c, err := parse([]string{"--period", "5s", "--link", "/git/current"}, env, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "pw", c.password, "GITSYNC_PASSWORD, a variable only, as git-sync's")
	assert.Equal(t, "https://git.example.com/g/app.git", c.repo)
	assert.Equal(t, 5*time.Second, c.period, "the command line wins over the environment")
	assert.True(t, c.oneTime)
	assert.Equal(t, "/git/current", c.link)

	c, err = parse([]string{"--repo", "https://git.example.com/g/app.git", "--root", "/git"}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "/git/app.git", c.link, "the URL's last element under root by default, as git-sync's")

	// git-sync's links: nested under root, or anywhere.
	for link, want := range map[string]string{"a/b": "/git/a/b", "/elsewhere/x": "/elsewhere/x", "../up": "/up"} {
		c, err = parse([]string{"--repo", "r", "--root", "/git", "--link", link}, noEnv, &bytes.Buffer{})
		require.NoError(t, err, link)
		assert.Equal(t, want, c.link)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--root", "/git"}, "--repo"},
		{[]string{"--repo", "r"}, "--root"},
		{[]string{"--repo", "r", "--root", "/git", "--cookie-file"}, "--cookie-file (GITSYNC_COOKIE_FILE, GIT_COOKIE_FILE) is not supported"},
		{[]string{"--repo", "r", "--root", "/git", "--github-app-client-id", "x"}, "flag provided but not defined: -github-app-client-id"},
		{[]string{"--repo", "r", "--root", "/git", "--filter", "tree:0"}, "leaves out trees"},
		{[]string{"--repo", "r", "--root", "/git", "--filter", "blob:many"}, "not a filter spec"},
		{[]string{"--repo", "https://h/r", "--root", "/git", "--filter", "blob:none", "--also", "link=l2,repo=https://h/r,path=d"}, "exclusive"},
		{[]string{"--repo", "r", "--root", "/git", "--link", "/git"}, "names --root"},
		{[]string{"--repo", "r", "--root", "/git", "--link", ".worktrees/x"}, "names --root or its worktrees"},
		{[]string{"--repo", "r", "--root", "/git", "--git-gc", "sometimes"}, "--git-gc must be one of"},
		{[]string{"--repo", "r", "--root", "/git", "--submodules", "all"}, "--submodules must be one of"},
		{[]string{"--repo", "r", "--root", "/git", "--exechook-command", "x", "--exechook-backoff", "10ms"}, "at least 1s"},
		{[]string{"--repo", "r", "--root", "/git", "--webhook-url", "http://x", "--webhook-success-status", "-2"}, "valid HTTP code"},
		{[]string{"--repo", "r", "--root", "/git", "--sync-on-signal", "SIGNOPE"}, "unknown signal"},
		{[]string{"--repo", "r", "--root", "/git", "--sync-on-signal", "99"}, "no signal 99"},
		{[]string{"--repo", "r", "--root", "/git", "--git-config", "a.b"}, "unexpected end of key"},
		{[]string{"--repo", "r", "--root", "/git", "--path", "d", "--sparse-checkout-file", "/f"}, "exclusive"},
	} {
		_, err := parse(tc.args, noEnv, &bytes.Buffer{})
		assert.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
	var out bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"--bogus"}, noEnv, &out))
	assert.Contains(t, out.String(), "flag provided but not defined: -bogus")

	// A variable of git-sync's this program does not take fails as a flag
	// does, by name: it is never silently dropped.
	out.Reset()
	args := []string{"--repo", "r", "--root", "/git"}
	assert.Equal(t, 2, run(context.Background(), args, []string{"GITSYNC_GITHUB_APP_CLIENT_ID=x", "GIT_SYNC_GIT_CREDENTIAL=x", "GITSYNC_PERIOD=1s"}, &out))
	assert.Contains(t, out.String(), "environment variables this program does not take: GITSYNC_GITHUB_APP_CLIENT_ID, GIT_SYNC_GIT_CREDENTIAL")

	// git-sync v3's spellings, which v4 takes: flags and variables.
	c, err = parse([]string{"--repo", "r", "--root", "/git", "--branch", "dev", "--wait", "1.5", "--timeout", "7", "--max-sync-failures", "3",
		"--sync-hook-command", "/hook", "--ssh"}, []string{"GIT_SYNC_DEST=v3link", "GIT_SYNC_PERIOD=4s"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "dev", c.ref)
	assert.Equal(t, "/git/v3link", c.link)
	assert.Equal(t, 1500*time.Millisecond, c.period, "--wait wins over the period, as git-sync's")
	assert.Equal(t, 7*time.Second, c.syncTimeout)
	assert.Equal(t, 3, c.maxFailures)
	assert.Equal(t, "/hook", c.exechookCommand)
	assert.Contains(t, c.notes, "setting --ref from deprecated --branch", "each said at start")
	_, err = parse([]string{"--repo", "r", "--root", "/git", "--branch", "a", "--rev", "b"}, noEnv, &bytes.Buffer{})
	assert.ErrorContains(t, err, "one or the other")
	_, err = parse([]string{"--repo", "r", "--root", "/git", "--change-permissions", "0775"}, noEnv, &bytes.Buffer{})
	assert.ErrorContains(t, err, "no longer supported")
	for name, want := range map[string]syscall.Signal{"HUP": syscall.SIGHUP, "SIGHUP": syscall.SIGHUP, "1": syscall.SIGHUP, "USR1": syscall.SIGUSR1, "0x2": syscall.SIGINT} {
		c, err = parse(append(args, "--sync-on-signal", name), noEnv, &bytes.Buffer{})
		require.NoError(t, err, name)
		assert.Equal(t, want, c.signal, name)
	}
	c, err = parse(append(args, "--git-config", `a.b:1,"c.d":"x,y"`, "--git-config-add", "e.f:g h"), []string{"GITSYNC_GIT_GC=off"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []string{"a.b=1", "c.d=x,y", "e.f=g h"}, c.gitConfigs)
	assert.Equal(t, "off", c.gitGC)
	c, err = parse(args, []string{"GITSYNC_USERNAME=u", "GITSYNC_PASSWORD=pw", "GITSYNC_PASSWORD_FILE=/f"}, &bytes.Buffer{})
	require.NoError(t, err)
	_, err = c.auth()
	assert.ErrorContains(t, err, "exclusive")
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

	// The exechook runs in the new tree, after the link moved, with the
	// commit in GITSYNC_HASH, as git-sync's.
	hookScript := filepath.Join(t.TempDir(), "hook.sh")
	script := "#!/bin/sh\n" + `[ "$(cat version)" = "$(cat "$ROOT/current/version")" ] && [ ${#GITSYNC_HASH} -eq 40 ] && echo "$(cat version)" >> "$HOOK_LOG"` + "\n"
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
		}, 30*time.Second, 20*time.Millisecond, "the consumer sees %v: %s", want, stderr.String())
	}
	seen("0")
	repo.Commit(t, "1", gittest.File("version", "1"))
	seen("0", "1")
	repo.Commit(t, "2", gittest.File("version", "2"))
	seen("0", "1", "2")
	// The force-push: history rewritten in the work tree, pushed once.
	repo.Git(t, "reset", "-q", "--hard", base)
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
	entries, err := os.ReadDir(filepath.Join(root, ".worktrees"))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "old worktrees are removed")
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
	data, err := os.ReadFile(filepath.Join(root, "app.git", "version"))
	require.NoError(t, err)
	assert.Equal(t, "0", string(data))

	stderr.Reset()
	code = run(context.Background(), []string{"--repo", repo.URL(), "--root", t.TempDir(), "--ref", "missing", "--one-time"}, noEnv, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "consecutive failures")
}

// A repository the watcher refuses is a failure like any other: --one-time
// ends with it (it waited forever), even with failures allowed.
func TestInvalidRepositoryEndsOneTime(t *testing.T) {
	for _, extra := range [][]string{nil, {"--max-failures", "5"}} {
		var stderr bytes.Buffer
		args := append([]string{"--repo", "ftp://git.example.com/g/app.git", "--root", t.TempDir(), "--one-time"}, extra...)
		done := make(chan int, 1)
		go func() { done <- run(context.Background(), args, noEnv, &stderr) }()
		select {
		case code := <-done:
			assert.Equal(t, 1, code, "%v", extra)
			assert.Contains(t, stderr.String(), "invalid target", "%v", extra)
		case <-time.After(30 * time.Second):
			t.Fatalf("%v: --one-time did not end", extra)
		}
	}
}

// A single user's sidecar, as git-sync: a local repository (file://) and
// credentials over plain http:// are taken. The local repository is
// another user's where the test can make it so (as root, as CI runs), as
// git-sync syncs one: every git the program runs, the upload-pack go-git
// runs for file:// included, reads the program's configuration
// (safe.directory), where git refused it as of "dubious ownership"; the
// program leaves the process's environment as it found it.
func TestLocalRepositoriesAndPlainHTTPCredentials(t *testing.T) {
	srv := gittest.NewServer(t)
	local := srv.NewRepo(t, "g/local")
	local.Commit(t, "0", gittest.File("version", "0"))
	if os.Getuid() == 0 {
		require.NoError(t, filepath.WalkDir(local.BareDir(), func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, 65533, 65533)
		}))
	}
	before, had := os.LookupEnv("GIT_CONFIG_GLOBAL")
	root := t.TempDir()
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--repo", "file://" + local.BareDir(), "--root", root, "--link", "local", "--one-time"}, noEnv, &stderr)
	require.Equal(t, 0, code, stderr.String())
	data, err := os.ReadFile(filepath.Join(root, "local", "version"))
	require.NoError(t, err)
	assert.Equal(t, "0", string(data))
	after, has := os.LookupEnv("GIT_CONFIG_GLOBAL")
	assert.Equal(t, had, has)
	assert.Equal(t, before, after)

	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("version", "0"))
	srv.SetBasicAuth("u", "s3cr3t-pw")
	stderr.Reset()
	code = run(context.Background(), []string{"--repo", repo.URL(), "--root", root, "--link", "http", "--username", "u", "--one-time"},
		[]string{"GITSYNC_PASSWORD=s3cr3t-pw"}, &stderr)
	require.Equal(t, 0, code, stderr.String())
	data, err = os.ReadFile(filepath.Join(root, "http", "version"))
	require.NoError(t, err)
	assert.Equal(t, "0", string(data))
	assert.NotContains(t, stderr.String(), "s3cr3t")
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

// What git-sync lacks: several repositories and paths in one process, and
// push hints that sync at once however long the period (the path filter is
// the watcher's, tested there: TestCommitOutsidePathIsNotDelivered).
func TestAlsoPathsAndPushHints(t *testing.T) {
	srv := gittest.NewServer(t)
	app, mono := srv.NewRepo(t, "g/app"), srv.NewRepo(t, "g/mono")
	app.Commit(t, "0", gittest.File("version", "a0"))
	mono.Commit(t, "0", gittest.File("svc/version", "m0"), gittest.File("docs/x", "0"))
	root := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("s3cret\n"), 0o600))
	hookAddr := freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		done <- run(ctx, []string{"--repo", app.URL(), "--root", root, "--period", "1h", "--max-failures", "-1",
			"--also", "link=svc,repo=" + mono.URL() + ",path=svc", "--commit-file", ".git-commit",
			"--hook-bind", hookAddr, "--hook-secret-file", secret, "--hook-gitlab-token-file", secret}, noEnv, &stderr)
	}()
	read := func(name string) string {
		data, _ := os.ReadFile(filepath.Join(root, name))
		return string(data)
	}
	waitFor := func(name, want string) {
		t.Helper()
		require.Eventually(t, func() bool { return read(name) == want }, 30*time.Second, 20*time.Millisecond, "%s = %q; %s", name, want, stderr.String())
	}
	waitFor("app.git/version", "a0")
	waitFor("svc/version", "m0")
	tree, err := os.Readlink(filepath.Join(root, "svc"))
	require.NoError(t, err)

	c2 := mono.Commit(t, "svc", gittest.File("svc/version", "m1"))
	assert.Equal(t, http.StatusAccepted, postHint(t, hookAddr, "s3cret", mono.URL()))
	waitFor("svc/version", "m1")
	waitFor("svc/.git-commit", c2+"\n")
	now, err := os.Readlink(filepath.Join(root, "svc"))
	require.NoError(t, err)
	assert.NotEqual(t, tree, now)
	assert.Equal(t, "a0", read("app.git/version"))

	// Each forge the library verifies: a GitLab push, with its token.
	app.Commit(t, "1", gittest.File("version", "a1"))
	body := []byte(`{"project": {"git_http_url": "` + app.URL() + `"}}`)
	req, err := http.NewRequest(http.MethodPost, "http://"+hookAddr+"/hooks", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Gitlab-Event", "Push Hook")
	req.Header.Set("X-Gitlab-Token", "s3cret")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusAccepted, resp.StatusCode)
	waitFor("app.git/version", "a1")

	cancel()
	assert.Equal(t, 0, <-done, stderr.String())
}

// git-sync's own metrics are served beside the library's, with git-sync's
// meaning: a sync that published a new commit (and its fetch), a poll that
// found nothing, a failed sync.
func TestGitSyncMetrics(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("version", "0"))
	p := start(t, "--repo", repo.URL(), "--root", t.TempDir(), "--period", "100ms", "--max-failures", "-1")
	metric, addr, stderr := p.metric, p.addr, &p.stderr
	wait := func(name string, want float64) {
		t.Helper()
		require.Eventually(t, func() bool { return metric(name) == want }, 30*time.Second, 20*time.Millisecond, "%s = %v (is %v)", name, want, metric(name))
	}
	wait(`git_sync_count_total{status="success"}`, 1)
	wait("git_fetch_count_total", 1)
	require.Eventually(t, func() bool { return metric(`git_sync_count_total{status="noop"}`) >= 2 }, 30*time.Second, 20*time.Millisecond)
	repo.Commit(t, "1", gittest.File("version", "1"))
	wait(`git_sync_count_total{status="success"}`, 2)
	wait("git_fetch_count_total", 2)
	assert.Zero(t, metric(`git_sync_count_total{status="error"}`))
	srv.SetDown(true)
	require.Eventually(t, func() bool { return metric(`git_sync_count_total{status="error"}`) >= 1 }, 30*time.Second, 20*time.Millisecond)
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Contains(t, string(body), "\nmodwatch_polls_total{", "the library's own, beside")
	// The process's, as git-sync's default registry has them.
	for _, family := range []string{"go_goroutines", "go_memstats_alloc_bytes", "go_gc_duration_seconds", "process_resident_memory_bytes",
		"process_open_fds", "promhttp_metric_handler_requests_total", "promhttp_metric_handler_requests_in_flight"} {
		assert.Contains(t, string(body), "\n# TYPE "+family+" ", family)
	}
	assert.Equal(t, 0, p.stop(), stderr.String())
}

// --touch-file is touched after each sync that published a commit, and
// not between them, as git-sync's: relative to --root, or absolute.
func TestTouchFile(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("version", "0"))
	root := t.TempDir()
	for _, flagValue := range []string{"touch.file", filepath.Join(root, "dir", "touch.file")} {
		touched := absUnder(root, flagValue)
		p := start(t, "--repo", repo.URL(), "--root", root, "--link", "app", "--period", "100ms", "--max-failures", "-1",
			"--cache-dir", t.TempDir(), "--touch-file", flagValue)
		waitTouched := func(what string) {
			t.Helper()
			require.Eventually(t, func() bool { _, err := os.Stat(touched); return err == nil }, 30*time.Second, 20*time.Millisecond, "%s: %s", what, p.stderr.String())
			require.NoError(t, os.Remove(touched))
		}
		waitTouched("the first sync")
		c := repo.Commit(t, "1", gittest.File("version", flagValue))
		waitTouched("a new commit")
		data, err := os.ReadFile(filepath.Join(root, "app", "version"))
		require.NoError(t, err)
		assert.Equal(t, flagValue, string(data), "touched after the tree was published (%s)", c)
		p.periods(t, 5)
		assert.NoFileExists(t, touched, "not touched between syncs")
		assert.Equal(t, 0, p.stop(), p.stderr.String())
	}
}

// Health is 503 until the first sync, and 200 from the moment the touch
// file says it happened, as git-sync's; --git makes the fetches (here one
// that waits for the test).
func TestHealthBeforeAndAfterTheFirstSync(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("version", "0"))
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	wrapper := filepath.Join(dir, "git")
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = fetch ]; then while [ ! -e %q ]; do sleep 0.02; done; fi\nexec %q \"$@\"\n", release, gitBin)
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
	root := t.TempDir()
	touchFile := filepath.Join(root, "synced")
	p := start(t, "--repo", repo.URL(), "--root", root, "--link", "current", "--period", "100ms", "--git", wrapper, "--touch-file", touchFile)
	health := func() int {
		resp, err := http.Get("http://" + p.addr + "/")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Eventually(t, func() bool { return health() != 0 }, 30*time.Second, 10*time.Millisecond, "the endpoint answers")
	assert.Equal(t, http.StatusServiceUnavailable, health(), "the fetch has not ended")
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	require.Eventually(t, func() bool { _, err := os.Stat(touchFile); return err == nil }, 30*time.Second, 10*time.Millisecond, "synced: %s", p.stderr.String())
	assert.Equal(t, http.StatusOK, health())
	assert.Equal(t, 0, p.stop(), p.stderr.String())
}

// A --git that fails fails the sync, as git-sync's: go-git never stands
// in for the git the user gave (a policy wrapper that refuses a fetch),
// at the first fetch or a later one, at any depth; git's own words are
// said.
func TestAFailingGitFailsTheSync(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err)
	failing := filepath.Join(t.TempDir(), "git")
	require.NoError(t, os.WriteFile(failing, []byte("#!/bin/sh\ncase \"$1\" in fetch|clone|index-pack) echo refused by policy >&2; exit 1;; esac\nexec "+gitBin+" \"$@\"\n"), 0o755))
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("version", "0"))
	for _, depth := range []string{"1", "0"} {
		root := t.TempDir()
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"--repo", repo.URL(), "--root", root, "--link", "app", "--depth", depth, "--git", failing, "--one-time"}, noEnv, &stderr)
		assert.Equal(t, 1, code, "depth %s: %s", depth, stderr.String())
		assert.NoFileExists(t, filepath.Join(root, "app", "version"))
		assert.NotContains(t, stderr.String(), "go-git fetched instead", "depth %s", depth)
		assert.Contains(t, stderr.String(), "refused by policy", "git's own words")
	}
}
