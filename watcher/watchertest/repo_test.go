package watchertest_test

import (
	"io/fs"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A watcher follows a Repo as any remote: the first commit, then only the
// commits that change the target's path, each with From, Paths and its
// tree. With no git binary on PATH, all of it is go-git's.
func TestRepoWithoutGitBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := exec.LookPath("git")
	require.Error(t, err, "no git binary is reachable")
	testRepo(t)
}

// With the git binary, the first fetch is the git CLI's, against the same
// in-process server.
func TestRepoWithGitBinary(t *testing.T) {
	git, err := exec.LookPath("git")
	require.NoError(t, err, "git is on every machine this project runs on")
	testRepo(t, watcher.WithGit(watcher.GoGit{GitCLI: git}))
}

func testRepo(t *testing.T, opts ...watcher.Option) {
	repo := watchertest.NewRepo(t)
	assert.Empty(t, repo.Head())
	first := repo.Commit(t, map[string]string{"deploy/app.yaml": "replicas: 1\n", "README": "hi\n"})
	assert.Equal(t, first, repo.Head())

	obs := watchertest.NewObserver()
	w := watchertest.NewWatcher(t, append(opts, watcher.WithObserver(obs))...)
	sink := watchertest.NewSink("rec")
	w.Route(watchertest.NewSource(watcher.Target{ID: "app", URL: repo.URL(), Path: "deploy"}), sink)
	watchertest.Run(t, w.Run)

	c := sink.WaitCommit(t, "app", first)
	assert.Equal(t, watcher.ReasonInitial, c.Reason)
	data, err := fs.ReadFile(c.FS, "app.yaml")
	require.NoError(t, err)
	assert.Equal(t, "replicas: 1\n", string(data))

	outside := repo.Commit(t, map[string]string{"README": "hello\n"})
	w.Trigger(repo.URL())
	obs.WaitFor(t, "the commit outside the path seen", func(e watcher.Event) bool {
		return e.Type == watcher.EventUpToDate && e.Commit == outside
	})

	second := repo.Commit(t, map[string]string{"deploy/app.yaml": "replicas: 2\n", "deploy/extra.yaml": "x: 1\n"})
	w.Trigger(repo.URL())
	c = sink.WaitCommit(t, "app", second)
	assert.Equal(t, outside, c.From, "the commit outside the path was recorded")
	assert.Equal(t, watcher.ReasonNewCommit, c.Reason)
	assert.ElementsMatch(t, []string{"app.yaml", "extra.yaml"}, c.Paths)

	third := repo.Commit(t, map[string]string{"deploy/extra.yaml": ""})
	w.Trigger(repo.URL())
	c = sink.WaitCommit(t, "app", third)
	_, err = fs.Stat(c.FS, "extra.yaml")
	assert.ErrorIs(t, err, fs.ErrNotExist, "an empty content removes the file")
	assert.Len(t, sink.Delivered(), 3)
}
