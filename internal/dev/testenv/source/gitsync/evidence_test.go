package gitsync_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// noRemoval checks that no event of obs removed anything.
func noRemoval(t *testing.T, obs *watchertest.Observer) {
	t.Helper()
	for _, e := range obs.Events() {
		assert.NotEqual(t, watcher.EventRemoved, e.Type, "nothing removed: %s", e)
	}
}

// A GitSync still there is wanted, whatever else is true of it: made
// invalid by an edit, refused by the program, moved to another cluster.
// Its status says why it is not synced; what it applied stays, even with
// cascade deletion; fixed, it is synced again.
func TestAGitSyncStillThereIsNeverRemoved(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("a.yaml", cm("a", "1")))
	refuse := make(chan bool, 1)
	refuse <- false
	accept := func(metav1.Object, payload.GitSync) error {
		r := <-refuse
		refuse <- r
		if r {
			return errors.New("the program refuses it")
		}
		return nil
	}
	h := newHarness(t, "staging-1", apply.Config{CascadeDelete: true}, nil, func(c *gitsync.Config) { c.Accept = accept })
	h.create("web", spec(repo.URL(), "", h.ns))
	h.waitStatus("web", "synced", syncedAt(c1))
	uid := h.uid("a")

	bad := spec(repo.URL(), "../outside", h.ns)
	h.setSpec("web", bad)
	st := h.waitStatus("web", "invalid", func(s gitsync.Status) bool { return s.Phase == gitsync.PhaseFailed })
	assert.Contains(t, st.Message, "path")

	other := spec(repo.URL(), "", h.ns)
	other["destination"] = map[string]any{"cluster": "prod-1", "namespace": h.ns}
	h.setSpec("web", other)
	h.waitStatus("web", "another cluster's", func(s gitsync.Status) bool { return s.Phase == gitsync.PhaseNotApplicable })

	<-refuse
	refuse <- true
	h.setSpec("web", spec(repo.URL(), "", h.ns))
	h.waitStatus("web", "refused", func(s gitsync.Status) bool { return s.Phase == gitsync.PhaseFailed })
	// The status is written before the watcher has the set: wait for the
	// watcher to take it (named, not watched).
	h.obs.WaitFor(t, "the refused GitSync taken as not watched", func(e watcher.Event) bool {
		return e.Type == watcher.EventInvalidTarget && e.Err != nil && strings.Contains(e.Err.Error(), "the program refuses it")
	})
	// A removal would be decided by the pass that follows and carried out
	// on the delivery pool; one that is not decided leaves no event to
	// wait for, so its absence is looked for after a window that holds the
	// pass and an apiserver deletion.
	time.Sleep(time.Second)
	assert.Equal(t, uid, h.uid("a"), "what it applied stays")
	noRemoval(t, h.obs)

	<-refuse
	refuse <- false
	h.src.Refresh() // the program's verdict changed: the set is read again
	h.waitStatus("web", "synced again", syncedAt(c1))
	assert.Equal(t, uid, h.uid("a"))
	noRemoval(t, h.obs)
}

// A source forbidden to list GitSyncs at start gives no set: the watcher
// is told (EventNoSet, Stats.NoSet) and removes nothing, not even with the
// inventories of a previous run at hand and cascade deletion on.
func TestAGitSyncSourceForbiddenToListRemovesNothing(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("a.yaml", cm("a", "1")))
	h := newHarness(t, "staging-1", apply.Config{CascadeDelete: true}, nil)
	h.create("web", spec(repo.URL(), "", h.ns))
	h.waitStatus("web", "synced", syncedAt(c1))
	uid := h.uid("a")

	// A second program, whose account may not list GitSyncs, with the same
	// inventories.
	dyn, err := dynamic.NewForConfig(env.ServiceAccountConfig(h.ns, "no-rights"))
	require.NoError(t, err)
	src := gitsync.New(dyn, gitsync.Config{Namespace: h.ns, RefreshInterval: -1})
	sink, err := apply.New(env.Config, apply.Config{CascadeDelete: true, InventoryNamespace: h.ns})
	require.NoError(t, err)
	obs := watchertest.NewObserver()
	w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithObserver(obs))
	require.NoError(t, w.Route(src, sink))
	watchertest.Run(t, w.Run)
	e := obs.WaitFor(t, "the forbidden list reported", func(e watcher.Event) bool { return e.Type == watcher.EventNoSet })
	assert.ErrorContains(t, e.Err, "forbidden")
	assert.Equal(t, 1, w.Stats().NoSet)
	// What could wrongly remove here is a set handed after the informer
	// lists again (client-go's backoff: 0.8s to 1.6s): a list that fails
	// again reports nothing new (NoSet reports a reason once) and one that
	// is not taken for a set leaves no event, so the window holds a retry.
	time.Sleep(1500 * time.Millisecond)
	assert.Equal(t, uid, h.uid("a"), "nothing deleted")
	noRemoval(t, obs)
	_, err = env.Kube.CoreV1().ConfigMaps(h.ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
}

// A GitSync deleted while suspended (automatedSyncDisabled) is not
// removed, even with cascade deletion: its objects stay, its inventory
// goes, as Flux leaves a suspended Kustomization's objects when it is
// deleted. Deleted while not suspended, a GitSync's objects go with it.
func TestAGitSyncDeletedWhileSuspendedKeepsItsObjects(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("a/a.yaml", cm("a", "1")), gittest.File("b/b.yaml", cm("b", "1")))
	h := newHarness(t, "staging-1", apply.Config{CascadeDelete: true}, nil)
	h.create("a", spec(repo.URL(), "a", h.ns))
	h.create("b", spec(repo.URL(), "b", h.ns))
	h.waitStatus("a", "synced", syncedAt(c1))
	h.waitStatus("b", "synced", syncedAt(c1))
	uid := h.uid("a")

	h.src.SetSettings(gitsync.Settings{ClusterName: "staging-1", Suspend: true})
	require.Eventually(t, func() bool {
		a, ok := h.handed.target(gitsync.TargetID(h.ns, "a"))
		return ok && a.Suspend
	}, 30*time.Second, 10*time.Millisecond, "a handed suspended")
	require.NoError(t, env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns).Delete(context.Background(), "a", metav1.DeleteOptions{}))
	e := h.obs.WaitFor(t, "a forgotten", watchertest.Is(watcher.EventForgotten, gitsync.TargetID(h.ns, "a")))
	require.NoError(t, e.Err)
	assert.Equal(t, uid, h.uid("a"), "a suspended GitSync's objects stay")
	noRemoval(t, h.obs)

	// b is deleted once the source handed it resumed: deleted before, b
	// would leave its set as the source last handed it, suspended, and be
	// forgotten (its objects kept), as it should be then.
	h.src.SetSettings(gitsync.Settings{ClusterName: "staging-1"})
	require.Eventually(t, func() bool {
		b, ok := h.handed.target(gitsync.TargetID(h.ns, "b"))
		return ok && !b.Suspend
	}, 30*time.Second, 10*time.Millisecond, "b handed resumed")
	require.NoError(t, env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns).Delete(context.Background(), "b", metav1.DeleteOptions{}))
	h.obs.WaitFor(t, "b removed", watchertest.Is(watcher.EventRemoved, gitsync.TargetID(h.ns, "b")))
	_, there := h.value("b")
	assert.False(t, there, "cascade: b's objects deleted")
	assert.Equal(t, uid, h.uid("a"), "and a's still there")
}
