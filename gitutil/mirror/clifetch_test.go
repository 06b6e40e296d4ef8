package mirror

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// recordingGit is a git wrapper that appends each exit status to a file,
// so a test can tell that the CLI ran and succeeded (a failure would be
// hidden by the fallback to go-git).
func recordingGit(t *testing.T) (bin string, statuses func() string) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the tests need git")
	dir := t.TempDir()
	mark := filepath.Join(dir, "statuses")
	bin = filepath.Join(dir, "git")
	script := fmt.Sprintf("#!/bin/sh\necho \"$@\" >> %q\n%q \"$@\"\nrc=$?\necho $rc >> %q\nexit $rc\n", filepath.Join(dir, "args"), gitBin, mark)
	require.NoError(t, os.WriteFile(bin, []byte(script), 0o755))
	return bin, func() string {
		data, _ := os.ReadFile(mark)
		return string(data)
	}
}

func TestFirstFetchWithGitCLI(t *testing.T) {
	gitBin, statuses := recordingGit(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/private")
	c1 := repo.Commit(t, "one", gittest.File("a/x", "1"))
	repo.Tag(t, "v1", true)
	srv.SetBasicAuth("deploy", "cli-s3cret")
	auth := &gitutil.Auth{Username: "deploy", Password: "cli-s3cret", AllowInsecureHTTP: true}

	private := t.TempDir()
	m, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: gitBin, TempDir: private})
	require.NoError(t, err)
	fetches := repo.Counts().Fetches.Load()
	res, err := m.Fetch(ctxT(t), auth, []string{"refs/heads/main", "refs/tags/v1"})
	require.NoError(t, err)
	assert.True(t, res.Fetched)
	assert.Equal(t, c1, res.Refs["refs/heads/main"].String())
	assert.Equal(t, c1, res.Refs["refs/tags/v1"].String(), "annotated tag peeled")
	// One negotiation, the CLI's (its protocol v2 ls-refs counts as a
	// listing); the go-git fetch after it finds nothing to transfer. That
	// the CLI ran is shown by its arguments below.
	assert.Equal(t, fetches+1, repo.Counts().Fetches.Load())
	assert.Equal(t, "0\n", statuses())
	// What ps shows: no secret, the branch as one --branch=NAME word, and
	// the URL after "--".
	args, err := os.ReadFile(filepath.Join(filepath.Dir(gitBin), "args"))
	require.NoError(t, err)
	assert.NotContains(t, string(args), "cli-s3cret")
	assert.NotContains(t, string(args), base64.StdEncoding.EncodeToString([]byte("deploy:cli-s3cret")))
	assert.Contains(t, string(args), "--branch=main -- "+repo.URL())
	left, err := os.ReadDir(private)
	require.NoError(t, err)
	assert.Empty(t, left, "the credential files are removed after the clone")
	cfg, err := os.ReadFile(filepath.Join(m.dir, "config"))
	require.NoError(t, err)
	assert.NotContains(t, string(cfg), "cli-s3cret")

	// Later fetches are go-git's, into what the CLI wrote.
	c2 := repo.Commit(t, "two", gittest.File("a/x", "2"))
	res, err = m.Fetch(ctxT(t), auth, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.Equal(t, c2, res.Refs["refs/heads/main"].String())
	paths, err := m.ChangedPaths(ctxT(t), mustHash(c1), mustHash(c2), at("a"))
	require.NoError(t, err)
	assert.Equal(t, []string{"x"}, paths)

	// A wrong password fails without showing it, after the go-git retry.
	m2, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: gitBin})
	require.NoError(t, err)
	_, err = m2.Fetch(ctxT(t), &gitutil.Auth{Username: "deploy", Password: "bad-s3cret", AllowInsecureHTTP: true}, []string{"refs/heads/main"})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "bad-s3cret")
	assert.Equal(t, "0\n128\n", statuses(), "the CLI failed, then go-git did")
}

func TestFirstFetchFallsBackToGoGit(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("x", "1"))
	m, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: "/nonexistent/git"})
	require.NoError(t, err)
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.Equal(t, c1, res.Refs["refs/heads/main"].String())
}

// A listed first fetch is the CLI's clone and, for the listed refs the
// clone did not take (tags), one request: no advertisement of every ref
// again, as go-git's fetch would make.
func TestFirstListedFetchWithGitCLI(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a/x", "1"))
	repo.Tag(t, "v1", true)
	c2 := repo.Commit(t, "two", gittest.File("a/x", "2"))
	refs, err := gitutil.ListRefs(ctxT(t), repo.URL(), nil, nil)
	require.NoError(t, err)
	listed := map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"], "refs/tags/v1": refs.Refs["refs/tags/v1"]}

	m, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: gitBin})
	require.NoError(t, err)
	lists := repo.Counts().Lists.Load()
	res, err := m.FetchListed(ctxT(t), nil, listed)
	require.NoError(t, err)
	assert.Equal(t, c2, res.Refs["refs/heads/main"].String())
	assert.Equal(t, c1, res.Refs["refs/tags/v1"].String())
	assert.Equal(t, lists+1, repo.Counts().Lists.Load(), "the clone's listing only")
}

// What git leaves behind in its process group (a helper that outlives
// it, holding its stderr) is killed once git exits: it neither holds the
// fetch for the wait's delay nor fails a git that succeeded, nor runs on.
func TestGitsLeftoversDoNotHoldTheFetch(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	bin := filepath.Join(dir, "git")
	script := fmt.Sprintf("#!/bin/sh\nsleep 300 &\necho $! > %q\nexec %q \"$@\"\n", pidFile, gitBin)
	require.NoError(t, os.WriteFile(bin, []byte(script), 0o755))
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a/x", "1"))

	m, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: bin})
	require.NoError(t, err)
	fetches := repo.Counts().Fetches.Load()
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.Equal(t, c1, res.Refs["refs/heads/main"].String())
	assert.Equal(t, fetches+1, repo.Counts().Fetches.Load(), "git's fetch, not a fallback after it was said to fail")

	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscan(string(data), &pid)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	assert.Eventually(t, func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH }, 20*time.Second, 10*time.Millisecond,
		"git's leftover child is gone")
}

// With CLIFetches every fetch is the git CLI's — the first, the later ones,
// a commit's by hash — and a CLI that fails fails the fetch: go-git never
// stands in for the git a program's user gave it.
func TestCLIFetchesAreTheCLIsOnly(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))

	failing := filepath.Join(t.TempDir(), "git")
	require.NoError(t, os.WriteFile(failing, []byte("#!/bin/sh\necho refused by policy >&2\nexit 1\n"), 0o755))
	m, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: failing, CLIFetches: true,
		OnFallback: func(error) { t.Error("go-git stood in") }})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.ErrorContains(t, err, "refused by policy")
	assert.False(t, m.HasCommit(mustHash(c1)), "nothing was fetched")
	_, err = m.FetchCommit(ctxT(t), nil, mustHash(c1))
	require.ErrorContains(t, err, "refused by policy")

	for _, depth := range []int{0, 1} {
		gitBin, statuses := recordingGit(t)
		m, err = Open(t.TempDir(), repo.URL(), Options{GitCLI: gitBin, CLIFetches: true, ShallowDepth: depth})
		require.NoError(t, err)
		head := repo.Git(t, "rev-parse", "HEAD")
		res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
		require.NoError(t, err)
		assert.Equal(t, head, res.Refs["refs/heads/main"].String())
		c2 := repo.Commit(t, fmt.Sprint("2-", depth), gittest.File("f", "2"))
		res, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
		require.NoError(t, err)
		assert.Equal(t, c2, res.Refs["refs/heads/main"].String())
		side := repo.Commit(t, fmt.Sprint("3-", depth), gittest.File("f", "3"))
		repo.Reset(t, c2) // side is no ref's now
		_, err = m.FetchCommit(ctxT(t), nil, mustHash(side))
		require.NoError(t, err)
		assert.True(t, m.HasCommit(mustHash(side)))
		assert.Equal(t, "0\n0\n0\n", statuses(), "depth %d: three fetches, each the CLI's", depth)
	}
}

// OnFallback says, once per fetch, that go-git stood in for a git CLI
// that failed, with the CLI's error and never a credential; a CLI that
// succeeds is never reported.
func TestOnFallbackSaysWhenGoGitStoodIn(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := repo.Commit(t, "one", gittest.File("a", "1"))
	srv.SetBasicAuth("deploy", "fallback-s3cret")
	auth := &gitutil.Auth{Username: "deploy", Password: "fallback-s3cret", AllowInsecureHTTP: true}
	failing := filepath.Join(t.TempDir(), "git")
	// It prints what it was given, as a failing git may print its remote.
	require.NoError(t, os.WriteFile(failing, []byte("#!/bin/sh\necho \"fatal: $*\" >&2\nexit 128\n"), 0o755))
	working, _ := recordingGit(t)
	for _, tc := range []struct {
		name     string
		git      string
		fellBack int
	}{
		{"a git that fails", failing, 1},
		{"a git that works", working, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errs []error
			m, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: tc.git, OnFallback: func(cli error) { errs = append(errs, cli) }})
			require.NoError(t, err)
			res, err := m.Fetch(ctxT(t), auth, []string{"refs/heads/main"})
			require.NoError(t, err)
			assert.Equal(t, c, res.Refs["refs/heads/main"].String(), "the mirror was fetched either way")
			require.Len(t, errs, tc.fellBack)
			for _, e := range errs {
				assert.ErrorContains(t, e, "git clone")
				assert.ErrorContains(t, e, "exit status 128")
				assert.NotContains(t, e.Error(), "fallback-s3cret")
			}
		})
	}
}
