package watchertest_test

import (
	"context"
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// The in-memory Git answers as gitutil's mirror of the same commits does:
// the same files for each selection, the same changed paths, the same
// tree hashes equal and different, the same ancestry and the same errors.
// The reference is a Repo served over HTTP and a real GoGit mirror.
func TestGitAnswersAsTheRealMirror(t *testing.T) {
	history := []map[string]string{
		{"a/x.yaml": "x: 1\n", "a/b/y.yaml": "y: 1\n", "a/.sourceignore": "*.tmp\n# a comment\n", "a/z.tmp": "z\n", "c/w": "w\n", "top": "t\n"},
		{"c/w": "w2\n"},          // outside a
		{"a/b/y.yaml": "y: 2\n"}, // inside a and a/b
		{"a/q.tmp": "q\n"},       // inside a, hidden by its ignore file
		{"a/x.yaml": ""},         // a removal
	}
	repo := watchertest.NewRepo(t)
	git := watchertest.NewGit()
	remote := git.Remote("https://git.example/team/app.git")
	var real, mem []gitutil.Hash
	for _, files := range history {
		real = append(real, repo.Commit(t, files))
		mem = append(mem, remote.Commit(t, files))
	}
	ctx := t.Context()
	refs, err := watcher.GoGit{}.ListRefs(ctx, repo.URL(), nil, nil)
	require.NoError(t, err)
	realMirror, err := watcher.GoGit{}.OpenMirror(t.TempDir(), repo.URL(), mirror.Options{})
	require.NoError(t, err)
	_, err = realMirror.FetchListed(ctx, nil, refs.Refs)
	require.NoError(t, err)
	memRefs, err := git.ListRefs(ctx, remote.URL(), nil, []string{"refs/heads/"})
	require.NoError(t, err)
	assert.Equal(t, refs.Head, memRefs.Head)
	assert.Equal(t, []string{"refs/heads/main"}, keys(memRefs.Refs))
	memMirror, err := git.OpenMirror(t.TempDir(), remote.URL(), mirror.Options{})
	require.NoError(t, err)
	assert.False(t, memMirror.HasCommit(mem[0]), "nothing before a fetch")
	res, err := memMirror.FetchListed(ctx, nil, memRefs.Refs)
	require.NoError(t, err)
	assert.True(t, res.Fetched)
	assert.Equal(t, mem[len(mem)-1], res.Refs["refs/heads/main"])

	for name, sel := range map[string]mirror.Selection{
		"whole":       {},
		"path":        {Path: "a"},
		"ignore file": {Path: "a", IgnoreFile: ".sourceignore"},
		"paths":       {Path: "a", Paths: []string{"b"}},
		"ignore":      {Ignore: []string{"c/", "*.tmp"}},
		"negation":    {Path: "a", Ignore: []string{"*.yaml", "!b/y.yaml"}},
	} {
		for i := range history {
			want, wantErr := files(realMirror, real[i], sel)
			got, gotErr := files(memMirror, mem[i], sel)
			assert.Equal(t, wantErr != nil, gotErr != nil, "%s at %d: %v, %v", name, i, wantErr, gotErr)
			assert.Equal(t, want, got, "%s at %d", name, i)
			if i == 0 {
				continue
			}
			wantPaths, err := realMirror.ChangedPaths(ctx, real[i-1], real[i], sel)
			require.NoError(t, err)
			gotPaths, err := memMirror.ChangedPaths(ctx, mem[i-1], mem[i], sel)
			require.NoError(t, err)
			assert.Equal(t, wantPaths, gotPaths, "%s: changed paths %d→%d", name, i-1, i)
			assert.Equal(t, treeHash(t, realMirror, real[i-1], sel) == treeHash(t, realMirror, real[i], sel),
				treeHash(t, memMirror, mem[i-1], sel) == treeHash(t, memMirror, mem[i], sel), "%s: tree %d = tree %d", name, i-1, i)
		}
	}
	for _, m := range []struct {
		mirror  watcher.Mirror
		commits []gitutil.Hash
	}{{realMirror, real}, {memMirror, mem}} {
		anc, err := m.mirror.IsAncestor(ctx, m.commits[0], m.commits[4])
		require.NoError(t, err)
		assert.True(t, anc)
		anc, err = m.mirror.IsAncestor(ctx, m.commits[4], m.commits[0])
		require.NoError(t, err)
		assert.False(t, anc)
		_, err = m.mirror.FS(m.commits[0], mirror.Selection{Path: "missing"})
		assert.ErrorIs(t, err, mirror.ErrPathNotFound)
		_, err = m.mirror.FS(m.commits[0], mirror.Selection{Path: "a", Paths: []string{"missing"}})
		assert.ErrorIs(t, err, mirror.ErrPathNotFound)
		_, err = m.mirror.TreeHash(ctx, hash(t, "0123456789012345678901234567890123456789"), mirror.Selection{})
		assert.ErrorIs(t, err, mirror.ErrCommitNotFound)
		_, err = m.mirror.VerifyCommit(m.commits[0], "")
		assert.Error(t, err, "unsigned")
	}
}

// A watcher runs on the in-memory Git as on a real one: the first commit,
// only the commits that change its path, a force-push reported, a failing
// remote retried, and a mirror no target uses collected with its
// directory.
func TestWatcherOnGit(t *testing.T) {
	git := watchertest.NewGit()
	remote := git.Remote("https://git.example/team/app.git")
	first := remote.Commit(t, map[string]string{"deploy/app.yaml": "replicas: 1\n"})
	obs := watchertest.NewObserver()
	w := watchertest.NewWatcher(t, watcher.WithGit(git), watcher.WithObserver(obs), watcher.WithRetryBackoff(watcher.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}))
	sink := watchertest.NewSink("rec")
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "app", URL: remote.URL(), Path: "deploy"}), sink))
	watchertest.Run(t, w.Run)

	c := sink.WaitCommit(t, "app", first)
	b, err := fs.ReadFile(c.FS, "app.yaml")
	require.NoError(t, err)
	assert.Equal(t, "replicas: 1\n", string(b))

	remote.Commit(t, map[string]string{"README": "outside\n"})
	second := remote.Commit(t, map[string]string{"deploy/app.yaml": "replicas: 2\n"})
	w.Trigger(remote.URL())
	c = sink.WaitCommit(t, "app", second)
	assert.Equal(t, first, c.From)
	assert.Equal(t, []string{"app.yaml"}, c.Paths)
	assert.Equal(t, watcher.ReasonNewCommit, c.Reason)

	remote.SetRef(t, "refs/heads/main", first)
	remote.Fail(errors.New("remote down"))
	w.Trigger(remote.URL())
	failed := obs.WaitFor(t, "the failing listing", watchertest.Is(watcher.EventTargetFailed, "app"))
	assert.ErrorContains(t, failed.Err, "remote down")
	remote.Fail(nil)
	w.Trigger(remote.URL())
	c = sink.WaitCommit(t, "app", first)
	assert.Equal(t, watcher.ReasonForcePush, c.Reason)
	assert.GreaterOrEqual(t, remote.Lists(), 3)
	assert.GreaterOrEqual(t, remote.Fetches(), 1)
}

// A Git knows only its remotes: a target on another URL fails.
func TestGitRefusesUnknownRemotes(t *testing.T) {
	git := watchertest.NewGit()
	_, err := git.ListRefs(context.Background(), "https://git.example/none.git", nil, nil)
	assert.Error(t, err)
	_, err = git.OpenMirror(t.TempDir(), "https://git.example/none.git", mirror.Options{})
	assert.Error(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	git.Remote("https://git.example/r.git")
	_, err = git.ListRefs(ctx, "https://git.example/r.git", nil, nil)
	assert.ErrorIs(t, err, context.Canceled)
}

func hash(t *testing.T, s string) gitutil.Hash {
	t.Helper()
	h, err := gitutil.ParseHash(s)
	require.NoError(t, err)
	return h
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// files reads every file the selection keeps: path → content.
func files(m watcher.Mirror, commit gitutil.Hash, sel mirror.Selection) (map[string]string, error) {
	fsys, err := m.FS(commit, sel)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		out[p] = string(b)
		return err
	})
	return out, err
}

func treeHash(t *testing.T, m watcher.Mirror, commit gitutil.Hash, sel mirror.Selection) gitutil.Hash {
	t.Helper()
	h, err := m.TreeHash(t.Context(), commit, sel)
	require.NoError(t, err)
	return h
}
