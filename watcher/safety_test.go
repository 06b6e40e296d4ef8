package watcher_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// withCredentials puts user:password into a repository URL.
func withCredentials(url, user, password string) string {
	return strings.Replace(url, "://", "://"+user+":"+password+"@", 1)
}

// Two teams watch one private repository: A has the credentials (in its
// URL), B has none. B must get its own authentication error, never A's
// mirror or A's credentials, whichever comes first in the set.
func TestTenantsNeverShareAMirror(t *testing.T) {
	for _, order := range []string{"AB", "BA"} {
		t.Run(order, func(t *testing.T) {
			srv := gittest.NewServer(t)
			repo := srv.NewRepo(t, "g/private")
			c1 := repo.Commit(t, "1", gittest.File("secret.yaml", "team A only"))
			srv.SetBasicAuth("deploy", "a-s3cret")
			a := watcher.Target{ID: "A", URL: withCredentials(repo.URL(), "deploy", "a-s3cret"), Auth: &gitutil.Auth{AllowInsecureHTTP: true}}
			b := watcher.Target{ID: "B", URL: repo.URL()}
			targets := []watcher.Target{a, b}
			if order == "BA" {
				targets = []watcher.Target{b, a}
			}
			obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
			w := newWatcher(t, obs)
			require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
			start(t, w)

			sink.WaitCommit(t, "A", hash(c1))
			e := obs.WaitFor(t, "B's own failure", watchertest.Is(watcher.EventTargetFailed, "B"))
			assert.ErrorContains(t, e.Err, "authentication required")
			assert.Equal(t, repo.URL(), e.Target.URL)
			assert.Nil(t, e.Target.Auth, "B never gets A's credentials")
			for _, c := range sink.Attempts() {
				assert.Equal(t, "A", c.Target.ID, "B is never delivered")
				assert.Equal(t, repo.URL(), c.Target.URL, "the URL a sink sees has no credentials")
			}
			st := w.Stats()
			assert.Equal(t, 2, st.Remotes, "one remote, and one mirror, per reader")
			assert.Equal(t, 1, st.Failing)
		})
	}
}

// A password rotated in the credential's source (same ID, same user) is
// used at once and keeps the mirror: no new clone, nothing left behind.
func TestRotatedCredentialKeepsItsMirror(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/private")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	srv.SetBasicAuth("deploy", "pw-1")
	var mu sync.Mutex
	password := "pw-1"
	resolver := gitutil.CredentialResolverFunc(func(context.Context, string) (*gitutil.Auth, error) {
		mu.Lock()
		defer mu.Unlock()
		return &gitutil.Auth{ID: "secret:team/git", Username: "deploy", Password: password, AllowInsecureHTTP: true}, nil
	})
	cacheDir := t.TempDir()
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcherIn(t, obs, cacheDir, watcher.WithCredentials(resolver))
	target := watcher.Target{ID: "t", URL: repo.URL()}
	src := watchertest.NewSource(target)
	require.NoError(t, w.Route(src, sink))
	start(t, w)
	sink.WaitCommit(t, "t", hash(c1))
	fetches := repo.Counts().Fetches.Load()

	srv.SetBasicAuth("deploy", "pw-2")
	mu.Lock()
	password = "pw-2"
	mu.Unlock()
	src.Set(target) // the credential's source changed: a new set
	c2 := repo.Commit(t, "2", gittest.File("f", "2"))
	pollNow(t, w, obs, repo.URL())
	sink.WaitCommit(t, "t", hash(c2))

	assert.Len(t, mirrorDirs(t, cacheDir), 1, "the same mirror")
	assert.Zero(t, obs.Count(watchertest.Is(watcher.EventMirrorRebuilt, "")))
	assert.Equal(t, fetches+1, repo.Counts().Fetches.Load(), "one incremental fetch, no new clone")
}

// One tenant's target on a tag that names a tree fails with what the tag
// names, poll after poll, and the mirror another tenant's target reads is
// never rebuilt for it.
func TestTagOnATreeFailsItsTargetOnly(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	tree := repo.Git(t, "rev-parse", "HEAD^{tree}")
	repo.Git(t, "tag", "v9", tree)
	repo.Git(t, "push", "-q", "origin", "refs/tags/v9")

	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	good := watcher.Target{ID: "team-a", URL: repo.URL()}
	bad := watcher.Target{ID: "team-b", URL: repo.URL(), Revision: "v9"}
	require.NoError(t, w.Route(watchertest.NewSource(good, bad), sink))
	start(t, w)
	sink.WaitCommit(t, "team-a", hash(c1))
	e := obs.WaitFor(t, "team-b failing", watchertest.Is(watcher.EventTargetFailed, "team-b"))
	require.ErrorIs(t, e.Err, mirror.ErrNotCommit)
	assert.Contains(t, e.Err.Error(), "refs/tags/v9 names a tree ("+tree+")")
	assert.Equal(t, "refs/tags/v9", e.Ref)
	assert.Empty(t, e.Commit, "a tree is not a commit")

	for i := range 3 {
		c := repo.Commit(t, fmt.Sprint(i), gittest.File("f", fmt.Sprint(i)))
		pollNow(t, w, obs, repo.URL())
		sink.WaitCommit(t, "team-a", hash(c))
	}
	assert.Zero(t, obs.Count(watchertest.Is(watcher.EventMirrorRebuilt, "")), "the shared mirror is kept")
	assert.GreaterOrEqual(t, obs.Count(watchertest.Is(watcher.EventTargetFailed, "team-b")), 4, "failing at every poll")
	for _, c := range sink.Attempts() {
		assert.NotEqual(t, "team-b", c.Target.ID, "nothing handed to a sink for it")
	}
}

func TestLocalRepositoriesAreRefusedUnlessAllowed(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	local := watcher.Target{ID: "local", URL: "file://" + repo.BareDir()}

	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(local), sink))
	start(t, w)
	e := obs.WaitFor(t, "refused", watchertest.Is(watcher.EventInvalidTarget, "local"))
	assert.ErrorIs(t, e.Err, watcher.ErrInvalidTarget)
	assert.ErrorContains(t, e.Err, "local repositories are refused")
	assert.Equal(t, watcher.Stats{Invalid: 1, Synced: true}, w.Stats())

	obs2, sink2 := watchertest.NewObserver(), watchertest.NewSink("rec")
	w2 := newWatcher(t, obs2, watcher.WithLocalRepositories(), watcher.WithGit(watcher.GoGit{}))
	require.NoError(t, w2.Route(watchertest.NewSource(local), sink2))
	start(t, w2)
	sink2.WaitCommit(t, "local", hash(c1))
}

func TestInvalidURLsNeverRun(t *testing.T) {
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs)
	bad := []watcher.Target{
		{ID: "ext", URL: "ext::sh -c touch% /tmp/pwned"},
		{ID: "dash-host", URL: "ssh://-oProxyCommand=touch/r"},
		{ID: "dash-path", URL: "git@host:-u"},
		{ID: "branch", URL: "https://example.com/r", Revision: "--upload-pack=touch /tmp/pwned"},
		{ID: "query", URL: "https://example.com/r?private_token=q-s3cret"},
		{ID: "plain-http", URL: "http://deploy:h-s3cret@example.com/r"},
		{ID: "twice", URL: "https://deploy:t-s3cret@example.com/r", Auth: &gitutil.Auth{BearerToken: "x"}},
	}
	require.NoError(t, w.Route(watchertest.NewSource(bad...), watchertest.NewSink("rec")))
	start(t, w)
	for _, tgt := range bad {
		e := obs.WaitFor(t, tgt.ID, watchertest.Is(watcher.EventInvalidTarget, tgt.ID))
		assert.ErrorIs(t, e.Err, watcher.ErrInvalidTarget, tgt.ID)
		assert.NotContains(t, e.String(), "s3cret", tgt.ID)
		assert.NotContains(t, e.Target.URL, "s3cret", tgt.ID)
	}
	assert.Equal(t, len(bad), w.Stats().Invalid)
}

// Two watchers on one cache directory would take each other's live lock
// files for crash leftovers and rebuild each other's mirrors.
func TestOneWatcherPerCacheDirectory(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	cacheDir := t.TempDir()
	target := watcher.Target{ID: "t", URL: repo.URL()}

	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcherIn(t, obs, cacheDir)
	require.NoError(t, w.Route(watchertest.NewSource(target), sink))
	stop := watchertest.Run(t, w.Run)
	sink.WaitCommit(t, "t", hash(c1))

	second := newWatcherIn(t, watchertest.NewObserver(), cacheDir)
	require.NoError(t, second.Route(watchertest.NewSource(target), watchertest.NewSink("rec")))
	err := second.Run(t.Context())
	require.ErrorIs(t, err, watcher.ErrCacheDirInUse)
	assert.Contains(t, err.Error(), cacheDir)

	stop()
	third := newWatcherIn(t, watchertest.NewObserver(), cacheDir)
	sink3 := watchertest.NewSink("rec")
	require.NoError(t, third.Route(watchertest.NewSource(target), sink3))
	start(t, third)
	sink3.WaitCommit(t, "t", hash(c1))
}

// An observer may call the watcher back (Stats, Trigger, Remotes) on any
// event, including a mirror that cannot be opened.
func TestObserversMayCallTheWatcher(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("f", "1"))
	// A cache directory so deep that a mirror inside it cannot be made
	// (its paths pass PATH_MAX) while the directory itself can.
	cacheDir := t.TempDir()
	for len(cacheDir) < 3800 {
		cacheDir = filepath.Join(cacheDir, strings.Repeat("d", 200))
	}
	cacheDir = filepath.Join(cacheDir, strings.Repeat("e", 4060-len(cacheDir)-1))

	var w *watcher.Watcher
	obs := watchertest.NewObserver()
	calls := watcher.ObserverFunc(func(e watcher.Event) {
		_ = w.Stats()
		_, _ = w.Remotes()
		w.Trigger(repo.URL())
	})
	w = newWatcherIn(t, obs, cacheDir, watcher.WithObserver(calls))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL()}), watchertest.NewSink("rec")))
	start(t, w)
	e := obs.WaitFor(t, "the mirror's failure", watchertest.Is(watcher.EventTargetFailed, "t"))
	assert.ErrorContains(t, e.Err, "file name too long")
	assert.Equal(t, 1, w.Stats().Failing)
}

// logLines is a logger that keeps what it is told, at every verbosity.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 9})
}

func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// A failing target is logged at the default level when it starts failing
// and when it recovers, not on every poll.
func TestFailuresAreLoggedOncePerChange(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	var logs logLines
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(
		watcher.Target{ID: "t", URL: repo.URL(), Revision: "missing"},
		watcher.Target{ID: "bad", URL: "ftp://example.com/r"},
	), sink))
	startLogging(t, w, logs.logger())
	obs.WaitFor(t, "the first failure", watchertest.Is(watcher.EventTargetFailed, "t"))
	for range 2 {
		pollNow(t, w, obs, repo.URL())
	}
	assert.Equal(t, 3, obs.Count(watchertest.Is(watcher.EventTargetFailed, "t")), "observers hear every failure")
	assert.Equal(t, 1, logs.count(`"msg"="target failing" "error"="revision \"missing\"`), logs.String())
	assert.Equal(t, 1, logs.count(`"msg"="invalid target, not watched"`), logs.String())
	assert.Equal(t, watcher.Stats{Targets: 1, Remotes: 1, Invalid: 1, Failing: 1, Synced: true}, w.Stats())

	repo.Git(t, "push", "-q", "origin", "HEAD:refs/heads/missing")
	pollNow(t, w, obs, repo.URL())
	sink.WaitCommit(t, "t", hash(c1))
	assert.Equal(t, 1, logs.count(`"msg"="target recovered"`), logs.String())
	assert.Zero(t, w.Stats().Failing)
}

// A process killed mid-clone leaves the git CLI's credential files and a
// half-made clone behind; the next watcher on the directory clears both
// before it fetches anything.
func TestCrashLeftoversAreClearedAtStart(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	cacheDir := t.TempDir()
	keyDir := filepath.Join(cacheDir, ".tmp", "modwatch-git-123")
	require.NoError(t, os.MkdirAll(keyDir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(keyDir, "key"), []byte("PRIVATE KEY"), 0o600))
	clone := filepath.Join(cacheDir, "0123456789abcdef01234567.clone")
	require.NoError(t, os.MkdirAll(filepath.Join(clone, "objects"), 0o755))

	obs, sink := watchertest.NewObserver(), watchertest.NewSink("rec")
	w := newWatcherIn(t, obs, cacheDir)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL()}), sink))
	start(t, w)
	sink.WaitCommit(t, "t", hash(c1))
	assert.NoDirExists(t, keyDir)
	assert.NoDirExists(t, clone)
	fi, err := os.Stat(cacheDir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "mirrors of private repositories are the watcher's alone")
}
