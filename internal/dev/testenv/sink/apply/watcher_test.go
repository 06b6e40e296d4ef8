package apply_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// run starts a watcher routing target to sink and returns its observer and
// a func that stops it (also called at the end of the test).
func run(t *testing.T, target watcher.Target, sink watcher.Sink) (*watcher.Watcher, *watchertest.Observer, func()) {
	t.Helper()
	obs := watchertest.NewObserver()
	w := watcher.New(
		watcher.WithCacheDir(t.TempDir()),
		watcher.WithInterval(time.Hour),
		watcher.WithRetryBackoff(watcher.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}),
		watcher.WithObserver(obs),
	)
	require.NoError(t, w.Route(watchertest.NewSource(target), sink))
	return w, obs, watchertest.Run(t, w.Run)
}

// delivered waits for the delivery of commit and returns its Result.
func delivered(t *testing.T, obs *watchertest.Observer, commit string) *apply.Result {
	t.Helper()
	e := obs.WaitFor(t, "delivery of "+commit, func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Commit.String() == commit
	})
	res, ok := e.Result.(*apply.Result)
	require.True(t, ok, "the apply sink reports a *Result, got %T", e.Result)
	return res
}

func TestRawTreeEditPruneAndRestart(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init",
		gittest.File("deploy/a.yaml", configMap("a", "1")),
		gittest.File("deploy/more/b.yml", configMap("b", "1")+"---\n# only a comment\n---\n"+configMap("c", "1")),
		gittest.File("deploy/README.md", "not a manifest"),
		gittest.File("deploy/.github/ci.yaml", "on: push"),
		gittest.File("other/x.yaml", configMap("x", "1")),
	)
	target := watcher.Target{ID: "apps/" + ns, URL: repo.URL(), Revision: "main", Path: "deploy", Payload: payload.Render{Namespace: ns}}
	w, obs, stop := run(t, target, newSink(t, apply.Config{InventoryNamespace: ns}))

	res := delivered(t, obs, c1)
	assert.Equal(t, 3, res.Count(apply.Created), res.String())
	assert.Len(t, res.Entries, 3)
	assert.Nil(t, get(t, configMaps, ns, "x"), "only the target's path is applied")
	rv := resourceVersions(t, ns)

	// Editing one file configures only its object.
	c2 := repo.Commit(t, "bump a", gittest.File("deploy/a.yaml", configMap("a", "2")))
	w.Trigger(repo.URL())
	res = delivered(t, obs, c2)
	assert.Equal(t, map[string]apply.Action{
		"ConfigMap/" + ns + "/a": apply.Configured,
		"ConfigMap/" + ns + "/b": apply.Unchanged,
		"ConfigMap/" + ns + "/c": apply.Unchanged,
	}, actions(res))
	assert.Equal(t, "2", cmValue(t, ns, "a"))
	now := resourceVersions(t, ns)
	assert.Equal(t, rv["b"], now["b"])
	assert.Equal(t, rv["c"], now["c"])

	// Deleting a file prunes its objects.
	c3 := repo.Commit(t, "drop b", gittest.File("deploy/more/b.yml", configMap("c", "1")))
	w.Trigger(repo.URL())
	res = delivered(t, obs, c3)
	assert.Equal(t, apply.Deleted, actions(res)["ConfigMap/"+ns+"/b"], res.String())
	assert.Nil(t, get(t, configMaps, ns, "b"))
	stop()

	// A new watcher and a new sink, with no checkpoint: the prune comes from
	// the inventory in the cluster.
	c4 := repo.Commit(t, "drop a", gittest.Delete("deploy/a.yaml"))
	_, obs, _ = run(t, target, newSink(t, apply.Config{InventoryNamespace: ns}))
	res = delivered(t, obs, c4)
	assert.Equal(t, map[string]apply.Action{
		"ConfigMap/" + ns + "/a": apply.Deleted,
		"ConfigMap/" + ns + "/c": apply.Unchanged,
	}, actions(res))
	assert.Nil(t, get(t, configMaps, ns, "a"))
	assert.NotNil(t, get(t, configMaps, ns, "c"))
}

func TestInvalidYAMLAppliesNothingUntilTheNextGoodCommit(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/bad")
	c1 := repo.Commit(t, "init", gittest.File("a.yaml", configMap("a", "1")))
	target := watcher.Target{ID: "bad/" + ns, URL: repo.URL(), Payload: payload.Render{Namespace: ns}}
	w, obs, _ := run(t, target, newSink(t, apply.Config{}))
	delivered(t, obs, c1)

	c2 := repo.Commit(t, "broken",
		gittest.File("a.yaml", configMap("a", "2")),
		gittest.File("z/broken.yaml", configMap("ok", "1")+"---\nkind: [unclosed\n"),
	)
	w.Trigger(repo.URL())
	e := obs.WaitFor(t, "the failed delivery of c2", func(e watcher.Event) bool {
		return e.Type == watcher.EventDeliveryFailed && e.Commit.String() == c2
	})
	assert.True(t, watcher.IsPermanent(e.Err), "a render error is not retried: %v", e.Err)
	assert.ErrorContains(t, e.Err, "z/broken.yaml: document 2")
	assert.Equal(t, "1", cmValue(t, ns, "a"), "nothing from the broken commit is applied")
	assert.Nil(t, get(t, configMaps, ns, "ok"))

	c3 := repo.Commit(t, "fixed", gittest.Delete("z/broken.yaml"), gittest.File("a.yaml", configMap("a", "3")))
	w.Trigger(repo.URL())
	res := delivered(t, obs, c3)
	assert.Equal(t, apply.Configured, actions(res)["ConfigMap/"+ns+"/a"])
	assert.Equal(t, "3", cmValue(t, ns, "a"))
}
