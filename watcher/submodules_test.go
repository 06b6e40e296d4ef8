package watcher_test

import (
	"io/fs"
	"path"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// tree reads every file of fsys but the .gitmodules files.
func tree(t *testing.T, fsys fs.FS) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Base(p) == ".gitmodules" {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		out[p] = string(data)
		return err
	}))
	return out
}

// A target that recurses into submodules gets them in its tree, nested
// ones too, at the commits its repository pins (a relative URL resolved
// against the repository's); a submodule's own new commits change nothing
// until the repository pins them.
func TestRecurseSubmodules(t *testing.T) {
	srv := gittest.NewServer(t)
	inner := srv.NewRepo(t, "g/inner")
	innerPin := inner.Commit(t, "inner", gittest.File("z.yaml", "z"))
	lib := srv.NewRepo(t, "g/lib")
	lib1 := lib.Commit(t, "lib v1", gittest.File("lib.yaml", "v1"), gittest.Submodule("inner", inner.URL(), innerPin))
	app := srv.NewRepo(t, "g/app")
	c1 := app.Commit(t, "app", gittest.File("deploy/app.yaml", "app"), gittest.Submodule("deploy/lib", "../lib.git", lib1))

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(
		watcher.Target{ID: "t", URL: app.URL(), Path: "deploy", RecurseSubmodules: true},
		watcher.Target{ID: "whole", URL: app.URL(), RecurseSubmodules: true},
	), sink))
	start(t, w)
	first := sink.WaitCommit(t, "t", hash(c1))
	whole := sink.WaitCommit(t, "whole", hash(c1))
	assert.Contains(t, tree(t, whole.FS), "deploy/lib/inner/z.yaml")
	assert.EqualValues(t, 1, lib.Counts().Fetches.Load(), "one fetch of the pinned commit, for both targets")
	assert.EqualValues(t, 1, inner.Counts().Fetches.Load())

	assert.Equal(t, map[string]string{"app.yaml": "app", "lib/lib.yaml": "v1", "lib/inner/z.yaml": "z"}, tree(t, first.FS))
	assert.Empty(t, first.Submodules, "nothing is left out")

	lib2 := lib.Commit(t, "lib v2", gittest.File("lib.yaml", "v2"))
	c2 := app.Commit(t, "docs", gittest.File("README", "not deployed"))
	pollNow(t, w, obs, app.URL())
	obs.WaitFor(t, "t up to date at c2", func(e watcher.Event) bool {
		return e.Type == watcher.EventUpToDate && e.Commit == hash(c2) && e.Target != nil && e.Target.ID == "t"
	})
	sink.WaitCommit(t, "whole", hash(c2)) // its README changed
	var toT int
	for _, c := range sink.Delivered() {
		if c.Target.ID == "t" {
			toT++
		}
	}
	assert.Equal(t, 1, toT, "the submodule's new commit is not pinned yet")

	c3 := app.Commit(t, "pin lib v2", gittest.Pin("deploy/lib", lib2))
	pollNow(t, w, obs, app.URL())
	got := sink.WaitCommit(t, "t", hash(c3))
	assert.Equal(t, map[string]string{"app.yaml": "app", "lib/lib.yaml": "v2", "lib/inner/z.yaml": "z"}, tree(t, got.FS))
	assert.Equal(t, []string{"lib"}, got.Paths, "the pin moved")
}

// A .gitmodules names any URL it likes: the target's own credentials go to
// its own host only, so a submodule on another host that would accept
// them is fetched without them, and fails.
func TestSubmoduleCredentialsStayOnTheirHost(t *testing.T) {
	srv := gittest.NewServer(t)
	srv.SetBasicAuth("deploy", "s3cret")
	elsewhere := gittest.NewServer(t)
	elsewhere.SetBasicAuth("deploy", "s3cret") // the same secret: only not sending it keeps it out
	mine := srv.NewRepo(t, "g/mine")
	minePin := mine.Commit(t, "mine", gittest.File("mine.yaml", "mine"))
	theirs := elsewhere.NewRepo(t, "g/theirs")
	theirsPin := theirs.Commit(t, "theirs", gittest.File("theirs.yaml", "theirs"))
	app := srv.NewRepo(t, "g/app")
	c1 := app.Commit(t, "app", gittest.File("app.yaml", "app"), gittest.Submodule("mine", "../mine.git", minePin))

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	auth := &gitutil.Auth{Username: "deploy", Password: "s3cret", AllowInsecureHTTP: true}
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: app.URL(), Auth: auth, RecurseSubmodules: true}), sink))
	start(t, w)
	first := sink.WaitCommit(t, "t", hash(c1))
	assert.Equal(t, map[string]string{"app.yaml": "app", "mine/mine.yaml": "mine"}, tree(t, first.FS), "its own host: its credentials")

	c2 := app.Commit(t, "theirs", gittest.Submodule("theirs", theirs.URL(), theirsPin))
	pollNow(t, w, obs, app.URL())
	e := obs.WaitFor(t, "the delivery failing", func(e watcher.Event) bool {
		return e.Type == watcher.EventDeliveryFailed && e.Commit == hash(c2)
	})
	assert.ErrorIs(t, e.Err, transport.ErrAuthenticationRequired)
	assert.Contains(t, e.Err.Error(), "submodule")
	assert.NotContains(t, e.Err.Error(), "s3cret")
	assert.Len(t, sink.Delivered(), 1)
	assert.Zero(t, theirs.Counts().Fetches.Load(), "nothing was fetched from the other host")
}
