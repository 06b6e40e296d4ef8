package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
)

// alternatingAskpass answers a wrong password at its odd calls and the
// right one at its even calls, as git-sync's
// e2e::auth_askpass_url_sometimes_wrong's; it counts them.
type alternatingAskpass struct {
	*httptest.Server
	mu    sync.Mutex
	calls int
	right string
}

func newAlternatingAskpass(t *testing.T, right string) *alternatingAskpass {
	a := &alternatingAskpass{right: right}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.calls++
		password := "wrong"
		if a.calls%2 == 0 {
			password = a.right
		}
		fmt.Fprintf(w, "username=u\npassword=%s\n", password)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *alternatingAskpass) called() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

func (a *alternatingAskpass) rotate(right string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.right = right
}

// Each sync attempt asks --askpass-url for its own credentials, as
// git-sync asks before each sync, and sends what it was answered: the
// listing that begins a poll asks, the poll's fetch sends the listing's
// answer, and a fetch of a commit no ref names, which no listing
// precedes, asks itself. A wrong answer fails its attempt only.
func TestAskpassAnswerServesItsAttempt(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("version", "0"))
	srv.SetBasicAuth("u", "right")
	answers := newAlternatingAskpass(t, "right")
	a := &askpass{ask: config{askpassURL: answers.URL}.askpass, repo: repo.URL()}
	git := &mirrorDirs{Git: watcher.GoGit{}, origin: repo.URL(), askpass: a, log: testr.New(t)}
	ctx := context.Background()
	prefixes := []string{"refs/heads/"}

	_, err := git.ListRefs(ctx, repo.URL(), nil, prefixes)
	require.Error(t, err, "the first answer is wrong: the attempt fails")
	refs, err := git.ListRefs(ctx, repo.URL(), nil, prefixes)
	require.NoError(t, err, "the next attempt asks again, and is answered right")
	require.Equal(t, 2, answers.called())

	m, err := git.OpenMirror(filepath.Join(t.TempDir(), "mirror"), repo.URL(), mirror.Options{})
	require.NoError(t, err)
	_, err = m.FetchListed(ctx, nil, refs.Refs)
	require.NoError(t, err, "the fetch sends its listing's answer")
	assert.Equal(t, 2, answers.called(), "the fetch of a listed ref does not ask")

	c1, err := gitutil.ParseHash(repo.Commit(t, "1", gittest.File("version", "1")))
	require.NoError(t, err)
	_, err = m.FetchCommit(ctx, nil, c1)
	require.Error(t, err, "a commit fetched by hash asks, and is answered wrong")
	_, err = m.FetchCommit(ctx, nil, c1)
	require.NoError(t, err, "asked again, and answered right")
	assert.Equal(t, 4, answers.called())
	assert.True(t, m.HasCommit(c1))

	_, err = git.ListRefs(ctx, "http://127.0.0.1:1/another.git", nil, prefixes)
	require.Error(t, err)
	assert.Equal(t, 4, answers.called(), "another repository's listing does not ask")
}

// --askpass-url is asked before each sync, however long the period: a
// password rotated after the first sync is had at the next one (a push
// hint's, here), and a wrong answer fails that sync only, the next asks
// again (git-sync's e2e::auth_askpass_url_sometimes_wrong, whose answers
// alternate). The secret is never logged.
func TestAskpassURLIsAskedBeforeEachSync(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("version", "0"))
	srv.SetBasicAuth("u", "token-1")
	answers := newAlternatingAskpass(t, "token-1")
	answers.calls = 1 // the first answer is the right one
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("s3cret\n"), 0o600))
	hookAddr := freeAddr(t)
	hint := func() {
		t.Helper()
		require.Equal(t, http.StatusAccepted, postHint(t, hookAddr, "s3cret", repo.URL()))
	}

	root := t.TempDir()
	p := start(t, "--repo", repo.URL(), "--root", root, "--link", "link", "--period", "1h", "--max-failures", "2",
		"--askpass-url", answers.URL, "--hook-bind", hookAddr, "--hook-secret-file", secret)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		require.Eventually(t, cond, 30*time.Second, 20*time.Millisecond, "%s: %s", what, p.stderr.String())
	}
	version := func() string {
		data, _ := os.ReadFile(filepath.Join(root, "link", "version"))
		return string(data)
	}
	waitFor("the first sync", func() bool { return version() == "0" })
	assert.Equal(t, 2, answers.called())

	answers.rotate("token-2")
	srv.SetBasicAuth("u", "token-2") // token-1 is refused from now on
	repo.Commit(t, "1", gittest.File("version", "1"))
	hint()
	const failed = `git_sync_count_total{status="error"}`
	waitFor("the hinted sync asks, and fails on its wrong answer", func() bool { return p.metric(failed) == 1 })
	assert.Equal(t, 3, answers.called())
	assert.Equal(t, "0", version())
	hint()
	waitFor("the next sync asks again, and has the rotated password", func() bool { return version() == "1" })
	assert.Equal(t, 4, answers.called())
	assert.Equal(t, 1.0, p.metric(failed))
	assert.Equal(t, 0, p.stop(), p.stderr.String())
	assert.NotContains(t, p.stderr.String(), "token-")
}
