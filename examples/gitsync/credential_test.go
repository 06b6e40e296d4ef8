package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

func TestCredentialFlag(t *testing.T) {
	var creds []credential
	f := credentialsFlag{&creds}
	require.NoError(t, f.Set(`{"url": "https://git.example.com/org", "username": "u", "password": "p"}`))
	require.NoError(t, f.Set(`{"url": "http://10.0.0.1/repo", "username": "u", "password-file": "/pw"}`))
	assert.Len(t, creds, 2)
	for in, want := range map[string]string{
		`{"url": "https://h/r", "username": "u"}`:                                        "one of password and password-file",
		`{"url": "https://h/r", "username": "u", "password": "p", "password-file": "f"}`: "one of password and password-file",
		`{"url": "https://h/r", "password": "p"}`:                                        "username is required",
		`{"url": "ssh://h/r", "username": "u", "password": "p"}`:                         "an http(s) URL is required",
		`{"url": "https://x:y@h/r", "username": "u", "password": "p"}`:                   "not in the URL",
		`{"url": "https://h/r", "username": "u", "password": "p", "extra": 1}`:           "unknown field",
		`{"url": "https://h/r", "username": "u", "password": "p\nusername=evil"}`:        "line break",
		`{"url": "https://h/r", "username": "u", "password": "p"} {}`:                    "one JSON object",
		`[`: "not a credential object",
	} {
		assert.ErrorContains(t, f.Set(in), want, in)
	}
	pw := filepath.Join(t.TempDir(), "pw")
	require.NoError(t, os.WriteFile(pw, []byte("a\nb\n"), 0o600))
	_, err := credential{URL: "https://h", Username: "u", PasswordFile: pw}.resolved()
	assert.ErrorContains(t, err, "more than one line", "a password file cannot inject a line into git's credential protocol")
}

// The helper answers git's request with the credential that serves it
// best (its host, then the longest path), and nothing else.
func TestCredentialHelper(t *testing.T) {
	data := `[{"url": "https://h", "username": "host", "password": "hp"}, {"url": "https://h/org/app", "username": "app", "password": "ap"}, {"url": "http://other:8080", "username": "o", "password": "op"}]`
	ask := func(args []string, req string) string {
		var out bytes.Buffer
		require.Equal(t, 0, credentialHelper(args, strings.NewReader(req), &out, data))
		return out.String()
	}
	assert.Equal(t, "username=host\npassword=hp\n", ask([]string{"get"}, "protocol=https\nhost=h\n\n"))
	assert.Equal(t, "username=app\npassword=ap\n", ask([]string{"get"}, "protocol=https\nhost=h\npath=org/app.git\n"))
	assert.Equal(t, "username=host\npassword=hp\n", ask([]string{"get"}, "protocol=https\nhost=h\npath=org/other.git\n"))
	assert.Equal(t, "username=o\npassword=op\n", ask([]string{"get"}, "protocol=http\nhost=other:8080\n"))
	assert.Empty(t, ask([]string{"get"}, "protocol=http\nhost=h\n"), "another scheme")
	assert.Empty(t, ask([]string{"get"}, "protocol=https\nhost=elsewhere\n"))
	assert.Empty(t, ask([]string{"store"}, "protocol=https\nhost=h\nusername=x\npassword=y\n"), "nothing is kept")
}

// Submodules behind credentials other than the repository's are fetched
// with --credential's, which git gets from the program as its credential
// helper; the secret reaches neither the log nor the worktree.
func TestSubmoduleCredentials(t *testing.T) {
	public := gittest.NewServer(t)
	private := gittest.NewServer(t)
	sub := private.NewRepo(t, "g/sub")
	s0 := sub.Commit(t, "s", gittest.File("sub.file", "private"))
	private.SetBasicAuth("robot", "s3cr3t-sub")
	app := public.NewRepo(t, "g/app")
	app.Commit(t, "a", gittest.File("file", "app"), gittest.Submodule("sub", sub.URL(), s0))
	root := t.TempDir()
	var out bytes.Buffer
	code := run(context.Background(), []string{"--repo", app.URL(), "--root", root, "--link", "link", "--one-time",
		"--credential", `{"url": "` + private.URL() + `", "username": "robot", "password": "s3cr3t-sub"}`}, noEnv, &out)
	require.Equal(t, 0, code, out.String())
	data, err := os.ReadFile(filepath.Join(root, "link", "sub", "sub.file"))
	require.NoError(t, err)
	assert.Equal(t, "private", string(data))
	assert.NotContains(t, out.String(), "s3cr3t-sub")
	assertNotOnDisk(t, root, "s3cr3t-sub")

	out.Reset()
	code = run(context.Background(), []string{"--repo", app.URL(), "--root", t.TempDir(), "--link", "link", "--one-time"}, noEnv, &out)
	assert.Equal(t, 1, code, "without the credential, the submodule is not fetched")
}

// The program's own configuration reads back through git as written: a
// path with quotes, backslashes, tabs and a line break.
func TestQuoteConfig(t *testing.T) {
	for _, v := range []string{`/plain/path`, `/with "quotes"/and\back\slashes`, "/tab\there", "/line\nbreak", `!'/self' --git-credential-helper`} {
		file := filepath.Join(t.TempDir(), "config")
		require.NoError(t, os.WriteFile(file, []byte("[include]\n\tpath = "+quoteConfig(v)+"\n"), 0o600))
		assert.Equal(t, v, strings.TrimSuffix(gitOut(t, t.TempDir(), "config", "--file", file, "--get", "include.path"), "\n"), "%q", v)
	}
}

// --askpass-url is asked for the credentials before each sync (see
// TestAskpassURLIsAskedBeforeEachSync): a failed call is a failed sync, a
// wrong password fails the sync, and the secret is never logged.
func TestAskpassURL(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("version", "0"))
	srv.SetBasicAuth("u", "askpass-s3cret")
	var mu sync.Mutex
	calls, down := 0, 2 // the first two calls fail
	password := "askpass-s3cret"
	askpass := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= down {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "username=u\npassword=%s\n", password)
	}))
	defer askpass.Close()

	root := t.TempDir()
	var out bytes.Buffer
	code := run(context.Background(), []string{"--repo", repo.URL(), "--root", root, "--link", "link", "--one-time", "--period", "100ms",
		"--max-failures", "5", "--askpass-url", askpass.URL}, noEnv, &out)
	require.Equal(t, 0, code, out.String())
	data, err := os.ReadFile(filepath.Join(root, "link", "version"))
	require.NoError(t, err)
	assert.Equal(t, "0", string(data))
	assert.Contains(t, out.String(), "503", "a failed call is said")
	assert.NotContains(t, out.String(), "askpass-s3cret")

	mu.Lock()
	calls, down, password = 0, 0, "wrong"
	mu.Unlock()
	out.Reset()
	assert.Equal(t, 1, run(context.Background(), []string{"--repo", repo.URL(), "--root", t.TempDir(), "--one-time", "--askpass-url", askpass.URL}, noEnv, &out))
	mu.Lock()
	calls, down = 0, 1<<30 // never answers
	mu.Unlock()
	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--repo", repo.URL(), "--root", t.TempDir(), "--one-time", "--period", "50ms", "--max-failures", "2",
			"--askpass-url", askpass.URL}, noEnv, &stderr)
	}()
	select {
	case code := <-done:
		assert.Equal(t, 1, code, "askpass never answers: failures, counted")
		assert.Contains(t, stderr.String(), "more than --max-failures=2: --askpass-url answered 503")
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatal("a failing --askpass-url is not counted as a failed sync")
	}
}

// --askpass-url's credentials reach the submodules on the repository's
// host, as git-sync stores them for git; never on disk.
func TestAskpassCredentialsReachSubmodules(t *testing.T) {
	srv := gittest.NewServer(t)
	sub := srv.NewRepo(t, "g/sub")
	s0 := sub.Commit(t, "s", gittest.File("sub.file", "private"))
	app := srv.NewRepo(t, "g/app")
	app.Commit(t, "a", gittest.File("file", "app"), gittest.Submodule("sub", sub.URL(), s0))
	srv.SetBasicAuth("u", "askpass-sub-s3cret")
	askpass := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "username=u\npassword=askpass-sub-s3cret\n")
	}))
	defer askpass.Close()
	root := t.TempDir()
	var out bytes.Buffer
	code := run(context.Background(), []string{"--repo", app.URL(), "--root", root, "--link", "link", "--one-time", "--askpass-url", askpass.URL}, noEnv, &out)
	require.Equal(t, 0, code, out.String())
	data, err := os.ReadFile(filepath.Join(root, "link", "sub", "sub.file"))
	require.NoError(t, err)
	assert.Equal(t, "private", string(data))
	assert.NotContains(t, out.String(), "askpass-sub-s3cret")
	assertNotOnDisk(t, root, "askpass-sub-s3cret")
}

// --askpass-url's credentials reach git for a repository of any scheme, as
// git-sync hands them (git credential approve): a --git that asks git's
// credential helpers for them (git-sync's own test tool,
// _test_tools/git_askpass.sh, does so for a file:// repository) gets them,
// and one that refuses the wrong ones fails the sync.
func TestAskpassCredentialsReachTheGitGiven(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("version", "0"))
	realGit, err := exec.LookPath("git")
	require.NoError(t, err)
	askpassGit := filepath.Join(t.TempDir(), "git")
	script := `#!/bin/sh
case "$1" in clone|ls-remote|fetch)
	repo=$(echo "$@" | grep -o "file://[^ ]*")
	out=$(echo "url=$repo" | "$REAL_GIT" credential fill) || exit 1
	[ "$out" = "$(printf 'protocol=file\nhost=\npath=%s\nusername=my-username\npassword=my-password' "${repo#file:///}")" ] || { echo "invalid test username/password pair" >&2; exit 1; }
esac
exec "$REAL_GIT" "$@"
`
	require.NoError(t, os.WriteFile(askpassGit, []byte(script), 0o755))
	t.Setenv("REAL_GIT", realGit)
	var mu sync.Mutex
	password := "my-password"
	askpass := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "username=my-username\npassword=%s\n", password)
	}))
	defer askpass.Close()

	root := t.TempDir()
	var out bytes.Buffer
	code := run(context.Background(), []string{"--repo", "file://" + repo.BareDir(), "--root", root, "--link", "link", "--one-time",
		"--git", askpassGit, "--askpass-url", askpass.URL}, noEnv, &out)
	require.Equal(t, 0, code, out.String())
	data, err := os.ReadFile(filepath.Join(root, "link", "version"))
	require.NoError(t, err)
	assert.Equal(t, "0", string(data))
	assert.NotContains(t, out.String(), "my-password")
	assertNotOnDisk(t, root, "my-password")

	mu.Lock()
	password = "wrong"
	mu.Unlock()
	out.Reset()
	root = t.TempDir()
	code = run(context.Background(), []string{"--repo", "file://" + repo.BareDir(), "--root", root, "--link", "link", "--one-time",
		"--git", askpassGit, "--askpass-url", askpass.URL}, noEnv, &out)
	assert.Equal(t, 1, code, "the --git given refused: the sync fails, as git-sync's: %s", out.String())
	assert.NoFileExists(t, filepath.Join(root, "link", "version"))
}

// A credential whose username or password holds a newline or a NUL is
// not handed to git, by the helper or by the socket: it would be lines of
// its own in git's answer (another username, a quit), and git refuses it.
func TestACredentialWithANewlineIsNotHandedToGit(t *testing.T) {
	for _, c := range []credential{
		{URL: "https://h", Username: "u", Password: "pw\nusername=evil"},
		{URL: "https://h", Username: "u\nquit=1", Password: "pw"},
		{URL: "https://h", Username: "u", Password: "pw\x00x"},
	} {
		data, err := json.Marshal([]credential{c})
		require.NoError(t, err)
		var out bytes.Buffer
		assert.Equal(t, 1, credentialHelper([]string{"get"}, strings.NewReader("protocol=https\nhost=h\n\n"), &out, string(data)))
		assert.Empty(t, out.String())

		s, err := listenCredentials(testr.New(t))
		require.NoError(t, err)
		s.set(c)
		out.Reset()
		require.NoError(t, askCredentialSocket(context.Background(), s.path(), map[string]string{"protocol": "https", "host": "h"}, &out))
		s.close()
		assert.Empty(t, out.String(), "the socket answers nothing")
	}
}
