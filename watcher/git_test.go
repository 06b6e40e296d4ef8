package watcher_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// faultyGit is the default git with a listing and a tree read failing
// once each.
type faultyGit struct {
	watcher.GoGit
	lists, trees atomic.Int32
}

var errInjected = errors.New("injected")

func (g *faultyGit) ListRefs(ctx context.Context, url string, auth *gitutil.Auth, prefixes []string) (gitutil.RefList, error) {
	if g.lists.Add(1) == 1 {
		return gitutil.RefList{}, errInjected
	}
	return g.GoGit.ListRefs(ctx, url, auth, prefixes)
}

func (g *faultyGit) OpenMirror(dir, url string, opts mirror.Options) (watcher.Mirror, error) {
	return wrapMirror(g.GoGit, dir, url, opts, func(m watcher.Mirror) watcher.Mirror { return faultyMirror{m, g} })
}

// wrapMirror opens the default git's mirror and gives it in wrap's.
func wrapMirror(git watcher.GoGit, dir, url string, opts mirror.Options, wrap func(watcher.Mirror) watcher.Mirror) (watcher.Mirror, error) {
	m, err := git.OpenMirror(dir, url, opts)
	if err != nil {
		return nil, err
	}
	return wrap(m), nil
}

type faultyMirror struct {
	watcher.Mirror
	g *faultyGit
}

func (m faultyMirror) FS(commit gitutil.Hash, sel mirror.Selection) (fs.FS, error) {
	if m.g.trees.Add(1) == 1 {
		return nil, errInjected
	}
	return m.Mirror.FS(commit, sel)
}

// The watcher reads git only through WithGit's: a failing listing fails
// the target until the next poll, a failing tree read fails the delivery
// until its retry, and nothing is lost.
func TestWithGit(t *testing.T) {
	repo := watchertest.NewRepo(t)
	commit := repo.Commit(t, map[string]string{"a.yaml": "a: 1\n"})
	git := &faultyGit{GoGit: watcher.DefaultGit()}
	obs := watchertest.NewObserver()
	w := watchertest.NewWatcher(t, watcher.WithGit(git), watcher.WithObserver(obs), watcher.WithRetryBackoff(watcher.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}))
	sink := watchertest.NewSink("rec")
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "a", URL: repo.URL()}), sink))
	watchertest.Run(t, w.Run)

	failed := obs.WaitFor(t, "the injected listing failure", watchertest.Is(watcher.EventTargetFailed, "a"))
	assert.ErrorIs(t, failed.Err, errInjected)
	w.Trigger(repo.URL())
	failed = obs.WaitFor(t, "the injected tree failure", watchertest.Is(watcher.EventDeliveryFailed, "a"))
	assert.ErrorIs(t, failed.Err, errInjected)
	sink.WaitCommit(t, "a", commit)
	assert.GreaterOrEqual(t, git.lists.Load(), int32(2))
	assert.GreaterOrEqual(t, git.trees.Load(), int32(2))
}

// With a shallow first fetch the mirror cannot tell a force-push from a
// new commit: it is delivered as one, without changed paths. With full
// history (the default) the same push is a force-push.
func TestFirstFetchDepth(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []watcher.Option
		reason watcher.Reason
	}{
		{"full history", nil, watcher.ReasonForcePush},
		{"depth 1", []watcher.Option{watcher.WithGit(watcher.GoGit{GitCLI: "git", FirstFetchDepth: 1})}, watcher.ReasonNewCommit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := gittest.NewServer(t)
			repo := srv.NewRepo(t, "g/r")
			base := repo.Commit(t, "base", gittest.File("a", "1"))
			old := repo.Commit(t, "old", gittest.File("a", "2"))
			obs := watchertest.NewObserver()
			sink := watchertest.NewSink("rec")
			w := newWatcher(t, obs, tc.opts...)
			require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL()}), sink))
			start(t, w)
			sink.WaitCommit(t, "t", hash(old))

			repo.Reset(t, base)
			rewritten := repo.Commit(t, "rewritten", gittest.File("a", "3"))
			w.Trigger(repo.URL())
			c := sink.WaitCommit(t, "t", hash(rewritten))
			assert.Equal(t, tc.reason, c.Reason)
			if tc.reason == watcher.ReasonForcePush {
				assert.Equal(t, []string{"a"}, c.Paths)
			}
		})
	}
}

// A tree with submodules is delivered without them, and says so: in the
// Change, in an event and in the log.
func TestSubmodulesAreReported(t *testing.T) {
	srv := gittest.NewServer(t)
	lib := srv.NewRepo(t, "g/lib")
	pin := lib.Commit(t, "lib", gittest.File("lib.yaml", "x"))
	repo := srv.NewRepo(t, "g/app")
	commit := repo.Commit(t, "init", gittest.File("deploy/app.yaml", "a"), gittest.Submodule("deploy/vendor/lib", lib.URL(), pin))
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: repo.URL(), Path: "deploy"}), sink))
	start(t, w)
	c := sink.WaitCommit(t, "t", hash(commit))
	assert.Equal(t, []string{"vendor/lib"}, c.Submodules)
	e := obs.WaitFor(t, "the report", watchertest.Is(watcher.EventSubmodulesLeftOut, "t"))
	assert.Equal(t, hash(commit), e.Commit)
	assert.Equal(t, []string{"vendor/lib"}, e.Change.Submodules)
}

// A target with Verify gets only the commits signed by a trusted key; an
// unsigned one, or one signed by another key, fails the target and the
// last delivery stays.
func TestVerifiedCommitsOnly(t *testing.T) {
	release, releasePub := gittest.SigningKey(t, "Release")
	mallory, _ := gittest.SigningKey(t, "Mallory")
	repo := watchertest.NewRepo(t)
	repo.SignWith(release)
	first := repo.Commit(t, map[string]string{"app.yaml": "v: 1\n"})

	obs := watchertest.NewObserver()
	w := watchertest.NewWatcher(t, watcher.WithObserver(obs))
	sink := watchertest.NewSink("rec")
	target := watcher.Target{ID: "app", URL: repo.URL(), Verify: &watcher.Verify{KeyRing: releasePub}}
	require.NoError(t, w.Route(watchertest.NewSource(target), sink))
	watchertest.Run(t, w.Run)
	sink.WaitCommit(t, "app", first)

	for name, signer := range map[string]*openpgp.Entity{"unsigned": nil, "signed by another key": mallory} {
		repo.SignWith(signer)
		bad := repo.Commit(t, map[string]string{"app.yaml": "v: " + name + "\n"})
		w.Trigger(repo.URL())
		e := obs.WaitFor(t, name, func(e watcher.Event) bool {
			return e.Type == watcher.EventTargetFailed && errors.Is(e.Err, mirror.ErrUnverified) && strings.Contains(e.Err.Error(), bad.String())
		})
		assert.Equal(t, "app", e.Target.ID)
		assert.Equal(t, bad, e.Commit, "the event names the commit refused")
		assert.Equal(t, "refs/heads/main", e.Ref)
	}
	repo.SignWith(release)
	good := repo.Commit(t, map[string]string{"app.yaml": "v: 2\n"})
	w.Trigger(repo.URL())
	c := sink.WaitCommit(t, "app", good)
	assert.Equal(t, first, c.From, "nothing unverified was delivered in between")
	assert.Len(t, sink.Delivered(), 2)
	assert.Equal(t, []watcher.Signature{{Kind: "commit", Name: good.String(), Signer: "Release <release@example.com>"}}, c.Verified, "who signed what is delivered")

	bad := watcher.Target{ID: "x", URL: repo.URL(), Verify: &watcher.Verify{KeyRing: "not a key"}}
	assert.ErrorIs(t, bad.Validate(), watcher.ErrInvalidTarget)
}

// SSH signatures (git's gpg.format=ssh) are verified as OpenPGP ones are,
// against the SSH public keys of the key ring, beside its OpenPGP keys.
func TestVerifiedSSHSignedCommits(t *testing.T) {
	release, releasePub := gittest.SSHSigningKey(t, "release")
	mallory, _ := gittest.SSHSigningKey(t, "mallory")
	_, pgpPub := gittest.SigningKey(t, "Release")
	repo := watchertest.NewRepo(t)
	repo.SignWithSSH(release)
	first := repo.Commit(t, map[string]string{"app.yaml": "v: 1\n"})

	obs := watchertest.NewObserver()
	w := watchertest.NewWatcher(t, watcher.WithObserver(obs))
	sink := watchertest.NewSink("rec")
	target := watcher.Target{ID: "app", URL: repo.URL(), Verify: &watcher.Verify{KeyRing: pgpPub + releasePub}}
	require.NoError(t, w.Route(watchertest.NewSource(target), sink))
	watchertest.Run(t, w.Run)
	sink.WaitCommit(t, "app", first)

	repo.SignWithSSH(mallory)
	bad := repo.Commit(t, map[string]string{"app.yaml": "v: mallory\n"})
	w.Trigger(repo.URL())
	e := obs.WaitFor(t, "signed by another SSH key", func(e watcher.Event) bool {
		return e.Type == watcher.EventTargetFailed && errors.Is(e.Err, mirror.ErrUnverified) && strings.Contains(e.Err.Error(), bad.String())
	})
	assert.Contains(t, e.Err.Error(), "not a trusted key")
	repo.SignWithSSH(release)
	good := repo.Commit(t, map[string]string{"app.yaml": "v: 2\n"})
	w.Trigger(repo.URL())
	c := sink.WaitCommit(t, "app", good)
	assert.Equal(t, first, c.From, "nothing unverified was delivered in between")
	require.Len(t, c.Verified, 1)
	assert.True(t, strings.HasPrefix(c.Verified[0].Signer, "SHA256:"), "an SSH key's fingerprint: %s", c.Verified[0].Signer)
}

// The tag modes verify the annotated tag the revision resolves through:
// Tag alone accepts an unsigned commit under a signed tag, TagAndHEAD does
// not; a revision that is not a tag fails either.
func TestVerifiedTags(t *testing.T) {
	release, keys := gittest.SigningKey(t, "Release")
	repo := watchertest.NewRepo(t)
	commit := repo.Commit(t, map[string]string{"app.yaml": "v: 1\n"}) // unsigned
	repo.SignWith(release)
	repo.Tag(t, "v1.0.0")
	repo.SignWith(nil)
	repo.Tag(t, "v0.9.0") // unsigned tag

	obs := watchertest.NewObserver()
	w := watchertest.NewWatcher(t, watcher.WithObserver(obs))
	sink := watchertest.NewSink("rec")
	targets := []watcher.Target{
		{ID: "tag", URL: repo.URL(), Revision: "v1.0.0", Verify: &watcher.Verify{Mode: watcher.VerifyTag, KeyRing: keys}},
		{ID: "tag-and-head", URL: repo.URL(), Revision: "v1.0.0", Verify: &watcher.Verify{Mode: watcher.VerifyTagAndHEAD, KeyRing: keys}},
		{ID: "unsigned-tag", URL: repo.URL(), Revision: "v0.9.0", Verify: &watcher.Verify{Mode: watcher.VerifyTag, KeyRing: keys}},
		{ID: "branch", URL: repo.URL(), Revision: "main", Verify: &watcher.Verify{Mode: watcher.VerifyTag, KeyRing: keys}},
	}
	require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
	watchertest.Run(t, w.Run)

	c := sink.WaitCommit(t, "tag", commit)
	assert.Equal(t, []watcher.Signature{{Kind: "tag", Name: "v1.0.0", Signer: "Release <release@example.com>"}}, c.Verified, "the tag's alone")
	for _, id := range []string{"tag-and-head", "unsigned-tag", "branch"} {
		e := obs.WaitFor(t, id+" refused", watchertest.Is(watcher.EventTargetFailed, id))
		assert.ErrorIs(t, e.Err, mirror.ErrUnverified, id)
	}
	for _, c := range sink.Delivered() {
		assert.Equal(t, "tag", c.Target.ID, "only the signed tag's target is delivered")
	}
	bad := watcher.Target{ID: "x", URL: repo.URL(), Verify: &watcher.Verify{Mode: "Tags", KeyRing: keys}}
	assert.ErrorIs(t, bad.Validate(), watcher.ErrInvalidTarget)
}

// countingGit is the default git, counting what its mirrors are asked
// whether they have.
type countingGit struct {
	watcher.GoGit
	has atomic.Int32
}

func (g *countingGit) OpenMirror(dir, url string, opts mirror.Options) (watcher.Mirror, error) {
	return wrapMirror(g.GoGit, dir, url, opts, func(m watcher.Mirror) watcher.Mirror { return countingMirror{m, g} })
}

type countingMirror struct {
	watcher.Mirror
	g *countingGit
}

func (m countingMirror) HasCommit(commit gitutil.Hash) bool {
	m.g.has.Add(1)
	return m.Mirror.HasCommit(commit)
}

// A poll asks the mirror once whether it has a commit that several of the
// remote's targets are at, not once a target.
func TestAPollAsksTheMirrorOnceForTheCommitItsTargetsShare(t *testing.T) {
	repo := watchertest.NewRepo(t)
	commit := repo.Commit(t, map[string]string{"a/x.yaml": "a: 1\n", "b/x.yaml": "b: 1\n", "c/x.yaml": "c: 1\n"})
	git := &countingGit{GoGit: watcher.DefaultGit()}
	obs := watchertest.NewObserver()
	w := watchertest.NewWatcher(t, watcher.WithGit(git), watcher.WithObserver(obs))
	sink := watchertest.NewSink("rec")
	var targets []watcher.Target
	for _, id := range []string{"a", "b", "c"} {
		targets = append(targets, watcher.Target{ID: id, URL: repo.URL(), Path: id, Interval: time.Hour})
	}
	require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
	watchertest.Run(t, w.Run)
	for _, id := range []string{"a", "b", "c"} {
		sink.WaitCommit(t, id, commit)
	}

	// The first poll reports itself after it offered, so a delivery can
	// come before its report: count from after it.
	obs.WaitCount(t, "the first poll", 1, watchertest.Is(watcher.EventPolled, ""))
	polled := obs.Count(watchertest.Is(watcher.EventPolled, ""))
	git.has.Store(0)
	require.True(t, w.Trigger(repo.URL()))
	obs.WaitCount(t, "the triggered poll", polled+1, watchertest.Is(watcher.EventPolled, ""))
	assert.Equal(t, int32(1), git.has.Load(), "lookups of the one commit in a poll of three targets")
}
