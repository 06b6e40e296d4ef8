package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// git-sync's contract: the link is a relative symlink to
// root/.worktrees/<hash>, a git worktree of the commit in which git works,
// its history --depth deep; a worktree removed or moved off its commit
// is made again; worktrees the link left and what is not a worktree are
// removed.
func TestWorktreesAreGitCheckouts(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "1", gittest.File("version", "1"))
	repo.Commit(t, "2", gittest.File("version", "2"))
	c3 := repo.Commit(t, "3", gittest.File("version", "3"), gittest.File("dir/f", "x"))
	root := t.TempDir()
	link := filepath.Join(root, "link")
	p := start(t, "--repo", repo.URL(), "--root", root, "--link", "link", "--period", "100ms", "--max-failures", "-1", "--depth", "2")
	stderr := &p.stderr
	at := func(hash string) {
		t.Helper()
		require.Eventually(t, func() bool {
			target, err := os.Readlink(link)
			if err != nil || target != filepath.Join(".worktrees", hash) {
				return false
			}
			_, err = os.Stat(filepath.Join(link, "version"))
			return err == nil
		}, 30*time.Second, 20*time.Millisecond, "link at %s: %s", hash, stderr.String())
	}
	at(c3)
	assert.Equal(t, c3, gitOut(t, link, "rev-parse", "HEAD"))
	assert.Equal(t, "2", gitOut(t, link, "rev-list", "--count", "HEAD"), "--depth 2")
	assert.Empty(t, gitOut(t, link, "status", "--porcelain"), "a clean checkout")
	assert.Equal(t, "dir/f\nversion", gitOut(t, link, "ls-files"))

	// Removed, then moved off its commit: made again, at the commit.
	require.NoError(t, os.RemoveAll(filepath.Join(root, ".worktrees", c3)))
	at(c3)
	require.NoError(t, os.WriteFile(filepath.Join(link, "version"), []byte("local"), 0o644))
	gitOut(t, link, "commit", "-qam", "local")
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(filepath.Join(link, "version"))
		return string(data) == "3"
	}, 30*time.Second, 20*time.Millisecond, "a worktree off its commit is made again")
	at(c3)
	assert.Equal(t, c3, gitOut(t, link, "rev-parse", "HEAD"))

	// Made beside, then renamed in: the command removes it at any time.
	garbage := filepath.Join(t.TempDir(), "not_a_hash")
	require.NoError(t, os.MkdirAll(filepath.Join(garbage, "sub"), 0o755))
	require.NoError(t, os.Rename(garbage, filepath.Join(root, ".worktrees", "not_a_hash")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "tmp-link"), []byte("theirs"), 0o644))
	c4 := repo.Commit(t, "4", gittest.File("version", "4"))
	at(c4)
	assert.Equal(t, "2", gitOut(t, link, "rev-list", "--count", "HEAD"), "--depth across updates")
	require.Eventually(t, func() bool {
		entries, _ := os.ReadDir(filepath.Join(root, ".worktrees"))
		return len(entries) == 1 && entries[0].Name() == c4
	}, 30*time.Second, 20*time.Millisecond, "the old worktree and what is not one are removed")
	data, err := os.ReadFile(filepath.Join(root, "tmp-link"))
	require.NoError(t, err)
	assert.Equal(t, "theirs", string(data), "a file beside the link is not the link's temporary name")
	assert.Equal(t, 0, p.stop(), stderr.String())

	// --depth 0 is the whole history, on a restart over the same root.
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--repo", repo.URL(), "--root", root, "--link", "link", "--one-time", "--depth", "0"}, noEnv, &out), out.String())
	assert.Equal(t, "4", gitOut(t, link, "rev-list", "--count", "HEAD"))
}

// A hook runs for the latest hash it was sent, is retried after its
// backoff until it succeeds, and never holds up the sender; with once it
// runs one time and reports how.
func TestHookRunner(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	fails := map[string]int{"a": 1}
	release := make(chan struct{})
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runs"}, []string{"name", "status"})
	r := newHookRunner("test", func(ctx context.Context, hash string) error {
		mu.Lock()
		calls = append(calls, hash)
		n := fails[hash]
		fails[hash] = n - 1
		mu.Unlock()
		if hash == "b" {
			<-release
		}
		if n > 0 {
			return errors.New("failed")
		}
		return nil
	}, 10*time.Millisecond, false, logr.Discard(), runs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), calls...)
	}
	r.send("a")
	require.Eventually(t, func() bool { return len(got()) == 2 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"a", "a"}, got(), "retried until it succeeds")
	require.Error(t, r.wait(ctx), "the first run's outcome")
	r.send("b")
	require.Eventually(t, func() bool { return len(got()) == 3 }, 10*time.Second, 5*time.Millisecond)
	r.send("c")
	r.send("d") // while b runs: d replaces c
	close(release)
	require.Eventually(t, func() bool { return len(got()) == 4 }, 10*time.Second, 5*time.Millisecond)
	r.send("e") // runs after whatever was still to run: nothing, if c was replaced
	require.Eventually(t, func() bool { return slices.Contains(got(), "e") }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"a", "a", "b", "d", "e"}, got(), "latest wins")

	once := newHookRunner("once", func(context.Context, string) error { return errors.New("no") }, 10*time.Millisecond, true, logr.Discard(), runs)
	wg.Go(func() { once.run(ctx) })
	once.send("x")
	require.EqualError(t, once.wait(ctx), "no")
}

// --one-time waits for the hooks' first runs: a failed one fails the run,
// after one try; the webhook is git-sync's (its method, Gitsync-Hash).
func TestOneTimeWaitsForHooks(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	c0 := repo.Commit(t, "0", gittest.File("version", "0"))
	hits := make(chan string, 10)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.Method + " " + r.Header.Get("Gitsync-Hash")
	}))
	defer web.Close()
	runlog := filepath.Join(t.TempDir(), "runs")
	script := filepath.Join(t.TempDir(), "hook.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho \"$GITSYNC_HASH $(cat version)\" >> "+runlog+"\nexit 3\n"), 0o755))
	root := t.TempDir()
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--repo", repo.URL(), "--root", root, "--one-time", "--exechook-command", script, "--exechook-backoff", "1s",
		"--webhook-url", web.URL, "--webhook-method", "PUT"}, noEnv, &stderr)
	assert.Equal(t, 1, code, stderr.String())
	data, err := os.ReadFile(runlog)
	require.NoError(t, err)
	assert.Equal(t, c0+" 0\n", string(data), "one run, in the worktree, with GITSYNC_HASH")
	assert.Equal(t, "PUT "+c0, <-hits)
	assert.Contains(t, stderr.String(), "exechook")
}

func TestParseGitConfigs(t *testing.T) {
	for in, want := range map[string][]string{
		"":                                    nil,
		"a.b:c":                               {"a.b=c"},
		`a.b:"x,y:z",c.d:e\,f`:                {"a.b=x,y:z", "c.d=e,f"},
		`"s.k":"v"`:                           {"s.k=v"},
		`http.postBuffer:10485760,sect.k:a b`: {"http.postBuffer=10485760", "sect.k=a b"},
		`a.b:"q\"uote\\d"`:                    {`a.b=q"uote\d`},
		`a.b:line\nnext`:                      {"a.b=line\nnext"},
	} {
		got, err := parseGitConfigs(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]string{
		"a.b":                  "unexpected end of key",
		"a.b:":                 "no value",
		":v":                   "empty key",
		`a.b:"open`:            "unterminated quoted value",
		`"a.b:v`:               "unterminated quoted key",
		`"a.b"x:v`:             "after quoted key",
		`a.b:"v"x`:             "after quoted value",
		`a.b:v\`:               "unterminated escape",
		`a.b:\q`:               "unknown escape",
		"a=b:c":                "not a git configuration name",
		"a.b:c,d":              "unexpected end of key",
		"\"a.b\"":              "unexpected end of key",
		"a\nb:c":               "not a git configuration name",
		strings.Repeat(`"`, 3): "after quoted key",
	} {
		_, err := parseGitConfigs(in)
		assert.ErrorContains(t, err, want, "%q", in)
	}
}

// A --password-file rotated in place is used from the next poll on, in
// the same mirror; credentials in an http(s) --repo are taken out of it.
func TestPasswordFileReadAgainAndURLCredentials(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("version", "0"))
	srv.SetBasicAuth("u", "first-pw")
	pwFile := filepath.Join(t.TempDir(), "pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("first-pw\n"), 0o600))
	root := t.TempDir()
	p := start(t, "--repo", repo.URL(), "--root", root, "--link", "link", "--period", "100ms", "--max-failures", "-1",
		"--username", "u", "--password-file", pwFile)
	version := func(want string) {
		t.Helper()
		require.Eventually(t, func() bool {
			data, _ := os.ReadFile(filepath.Join(root, "link", "version"))
			return string(data) == want
		}, 30*time.Second, 20*time.Millisecond, "version %s: %s", want, p.stderr.String())
	}
	version("0")
	srv.SetBasicAuth("u", "second-pw")
	repo.Commit(t, "1", gittest.File("version", "1"))
	const failed = `git_sync_count_total{status="error"}`
	require.Eventually(t, func() bool { return p.metric(failed) >= 2 }, 30*time.Second, 10*time.Millisecond, "polls refused with the old password")
	version("0")
	require.NoError(t, os.WriteFile(pwFile+".new", []byte("second-pw"), 0o600))
	require.NoError(t, os.Rename(pwFile+".new", pwFile))
	version("1")
	entries, err := os.ReadDir(filepath.Join(root, ".mirrors"))
	require.NoError(t, err)
	var mirrors []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			mirrors = append(mirrors, e.Name())
		}
	}
	assert.Len(t, mirrors, 1, "one mirror across the rotation")
	assert.Equal(t, 0, p.stop(), p.stderr.String())
	assert.NotContains(t, p.stderr.String(), "first-pw")
	assert.NotContains(t, p.stderr.String(), "second-pw")

	withCreds := strings.Replace(repo.URL(), "://", "://u:second-pw@", 1)
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--repo", withCreds, "--root", t.TempDir(), "--one-time"}, noEnv, &out), out.String())
	assert.NotContains(t, out.String(), "second-pw")
	out.Reset()
	assert.Equal(t, 2, run(context.Background(), []string{"--repo", withCreds, "--root", t.TempDir(), "--one-time", "--username", "u", "--password-file", pwFile}, noEnv, &out))
	assert.Contains(t, out.String(), "exclusive")
}

// A file of root named as the commit does not confuse git (git-sync's
// sync_sha_shafile_exists).
func TestFileNamedAsTheCommit(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "1", gittest.File("version", "1"))
	c2 := repo.Commit(t, "2", gittest.File("version", "2"))
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, c2), nil, 0o644))
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--repo", repo.URL(), "--root", root, "--link", "link", "--ref", c2, "--one-time", "--depth", "2"}, noEnv, &out), out.String())
	assert.Equal(t, "2", gitOut(t, filepath.Join(root, "link"), "rev-list", "--count", "HEAD"))
}

// Submodules are checked out in the worktree by default, recursively and
// at --depth, a relative URL against the repository's; --submodules=off
// leaves them out.
func TestWorktreeSubmodules(t *testing.T) {
	srv := gittest.NewServer(t)
	nested := srv.NewRepo(t, "g/nested")
	n0 := nested.Commit(t, "n", gittest.File("nested.file", "nested"))
	sub := srv.NewRepo(t, "g/sub")
	s0 := sub.Commit(t, "s", gittest.File("sub.file", "sub"), gittest.Submodule("deep", nested.URL(), n0))
	app := srv.NewRepo(t, "g/app")
	app.Commit(t, "a", gittest.File("file", "app"), gittest.Submodule("sub", "../sub.git", s0))
	root := t.TempDir()
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--repo", app.URL(), "--root", root, "--link", "link", "--one-time"}, noEnv, &out), out.String())
	data, err := os.ReadFile(filepath.Join(root, "link", "sub", "deep", "nested.file"))
	require.NoError(t, err, out.String())
	assert.Equal(t, "nested", string(data))
	assert.Equal(t, s0, gitOut(t, filepath.Join(root, "link", "sub"), "rev-parse", "HEAD"), "a git checkout of the submodule")

	off := t.TempDir()
	out.Reset()
	require.Equal(t, 0, run(context.Background(), []string{"--repo", app.URL(), "--root", off, "--link", "link", "--one-time", "--submodules", "off"}, noEnv, &out), out.String())
	assert.NoFileExists(t, filepath.Join(off, "link", "sub", "sub.file"))
}

// With --path, the worktree is checked out sparsely (that directory) and
// the link names the directory in it; a sound worktree is left alone
// between syncs.
func TestWorktreeOfAPath(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/mono")
	c0 := repo.Commit(t, "0", gittest.File("svc/version", "0"), gittest.File("docs/x", "x"))
	root := t.TempDir()
	p := start(t, "--repo", repo.URL(), "--root", root, "--link", "svc", "--path", "svc", "--period", "50ms", "--max-failures", "-1")
	link := filepath.Join(root, "svc")
	require.Eventually(t, func() bool {
		target, _ := os.Readlink(link)
		return target == filepath.Join(".worktrees", c0, "svc")
	}, 30*time.Second, 20*time.Millisecond, p.stderr.String())
	data, err := os.ReadFile(filepath.Join(link, "version"))
	require.NoError(t, err)
	assert.Equal(t, "0", string(data))
	assert.NoDirExists(t, filepath.Join(root, ".worktrees", c0, "docs"), "a sparse checkout of the path")
	marker := filepath.Join(root, ".worktrees", c0, "marker")
	require.NoError(t, os.WriteFile(marker, nil, 0o644))
	p.periods(t, 5)
	assert.FileExists(t, marker, "a sound worktree is not made again")
	assert.Equal(t, 0, p.stop(), p.stderr.String())
}

// A commit whose tree is empty is a worktree of its .git alone, and sound:
// it is not made again every period.
func TestWorktreeOfAnEmptyTree(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("f", "0"))
	empty := repo.Commit(t, "empty", gittest.Delete("f"))
	root := t.TempDir()
	p := start(t, "--repo", repo.URL(), "--root", root, "--link", "link", "--period", "50ms", "--max-failures", "-1")
	wt := filepath.Join(root, ".worktrees", empty)
	require.Eventually(t, func() bool {
		target, _ := os.Readlink(filepath.Join(root, "link"))
		return target == filepath.Join(".worktrees", empty)
	}, 30*time.Second, 20*time.Millisecond, p.stderr.String())
	require.FileExists(t, filepath.Join(wt, ".git"))
	p.periods(t, 5)
	assert.NotContains(t, p.stderr.String(), "making it again")
	assert.Equal(t, 0, p.stop(), p.stderr.String())
}

// A symlink that leads out of the worktree fails the commit (as the
// library's file systems fail it): the link never names such a tree, and
// it is not left on disk. A link that stays inside is checked out.
func TestSymlinkOutOfTheWorktreeFailsTheCommit(t *testing.T) {
	srv := gittest.NewServer(t)
	for name, links := range map[string][][2]string{
		"absolute": {{"d/escape", "/etc"}},
		"relative": {{"d/escape", "../../.."}},
		"nested":   {{"d/escape", "a/../../../x"}},
		// Each inside by its text; the second, through the first, leaves.
		"through a link": {{"top", "."}, {"up", "top/.."}},
	} {
		changes := []gittest.Change{gittest.File("f", "0")}
		for _, l := range links {
			changes = append(changes, gittest.Symlink(l[0], l[1]))
		}
		repo := srv.NewRepo(t, "g/"+strings.ReplaceAll(name, " ", "-"))
		bad := repo.Commit(t, "0", changes...)
		root := t.TempDir()
		var out bytes.Buffer
		assert.Equal(t, 1, run(context.Background(), []string{"--repo", repo.URL(), "--root", root, "--link", "link", "--one-time"}, noEnv, &out), name)
		assert.Contains(t, out.String(), "leads outside the tree", name)
		assert.NoFileExists(t, filepath.Join(root, "link"), name)
		assert.NoDirExists(t, filepath.Join(root, ".worktrees", bad), name)
	}
	repo := srv.NewRepo(t, "g/inside")
	repo.Commit(t, "0", gittest.File("d/f", "in"), gittest.Symlink("d/alias", "f"), gittest.Symlink("top", "d/alias"))
	root := t.TempDir()
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--repo", repo.URL(), "--root", root, "--link", "link", "--one-time"}, noEnv, &out), out.String())
	data, err := os.ReadFile(filepath.Join(root, "link", "top"))
	require.NoError(t, err)
	assert.Equal(t, "in", string(data))
}

// --depth is the disk the repository keeps, as git-sync's: the mirror
// holds the history of the worktrees' commits that deep (across restarts,
// deepened when a restart asks for more); --git-gc=off keeps everything.
func TestDepthIsWhatTheMirrorKeeps(t *testing.T) {
	const big = 1 << 20
	noise := func() string {
		b := make([]byte, big)
		_, _ = rand.Read(b)
		return string(b)
	}
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	c1 := repo.Commit(t, "1", gittest.File("small", "1"))
	c2 := repo.Commit(t, "2", gittest.File("big1", noise()))
	c3 := repo.Commit(t, "3", gittest.File("big2", noise()))
	root := t.TempDir()
	mirrors := filepath.Join(root, ".mirrors")
	once := func(ref string, extra ...string) {
		t.Helper()
		var out bytes.Buffer
		args := append([]string{"--repo", repo.URL(), "--root", root, "--link", "link", "--one-time", "--ref", ref}, extra...)
		require.Equal(t, 0, run(context.Background(), args, noEnv, &out), out.String())
	}
	once(c3, "--depth", "0")
	assert.Greater(t, gittest.DirBytes(t, mirrors), int64(2*big))
	once(c2, "--depth", "1")
	assert.Less(t, gittest.DirBytes(t, mirrors), int64(big+big/2), "big2 is not in c2's history")
	assert.Greater(t, gittest.DirBytes(t, mirrors), int64(big))
	once(c1, "--depth", "1")
	assert.Less(t, gittest.DirBytes(t, mirrors), int64(big/2))
	link := filepath.Join(root, "link")
	assert.Equal(t, "1", gitOut(t, link, "rev-list", "--count", "HEAD"))

	// A restart that asks for more history fetches it.
	once(c3, "--depth", "2")
	assert.Equal(t, c3+"\n"+c2, gitOut(t, link, "rev-list", "HEAD"))
	once(c3, "--depth", "0")
	assert.Equal(t, "3", gitOut(t, link, "rev-list", "--count", "HEAD"))
	assert.Empty(t, gitOut(t, link, "status", "--porcelain"))

	// Without garbage collection nothing is dropped.
	once(c1, "--depth", "1", "--git-gc", "off")
	assert.Greater(t, gittest.DirBytes(t, mirrors), int64(2*big))
}
