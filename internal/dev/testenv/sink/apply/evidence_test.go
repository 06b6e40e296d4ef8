package apply_test

import (
	"context"
	"fmt"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// inventories lists the inventory ConfigMaps in ns, by name.
func inventories(t *testing.T, ns string) map[string]string {
	t.Helper()
	l, err := env.Kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: apply.LabelInventory + "=true"})
	require.NoError(t, err)
	out := map[string]string{}
	for _, cm := range l.Items {
		out[cm.Name] = cm.Annotations[apply.AnnotationTargetID]
	}
	return out
}

// Two installs of one program (one field manager, one inventory
// namespace) told apart by their instance: each lists and sweeps only its
// own inventories, and still prunes its own.
func TestTwoInstancesNeverTouchEachOthersTargets(t *testing.T) {
	ns := env.Namespace(t)
	one := newSink(t, apply.Config{FieldManager: "ctl", InventoryNamespace: ns, Instance: "team-one", CascadeDelete: true})
	two := newSink(t, apply.Config{FieldManager: "ctl", InventoryNamespace: ns, Instance: "team-two", CascadeDelete: true})
	applyOK(t, one, change("gitsync/one/web", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("one-a", "1"))}))
	applyOK(t, two, change("gitsync/two/web", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("two-a", "1"))}))

	ids, err := one.Targets(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"gitsync/one/web"}, ids)
	ids, err = two.Targets(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"gitsync/two/web"}, ids)
	legacy := newSink(t, apply.Config{FieldManager: "ctl", InventoryNamespace: ns})
	ids, err = legacy.Targets(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, ids, "a sink without an instance lists none of theirs")

	// The second starts with no target of its own: its sweep at start
	// removes nothing of the first's.
	obs := watchertest.NewObserver()
	w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithObserver(obs))
	require.NoError(t, w.Route(watchertest.NewSource(), two))
	watchertest.Run(t, w.Run)
	obs.WaitFor(t, "two's own removed", watchertest.Is(watcher.EventRemoved, "gitsync/two/web"))
	assert.NotNil(t, get(t, configMaps, ns, "one-a"), "the first's object stays")
	assert.Nil(t, get(t, configMaps, ns, "two-a"), "the second pruned its own")
	ids, err = one.Targets(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"gitsync/one/web"}, ids)
}

// A manifest can never create, change or delete an inventory (its own,
// another target's, one posing as one), nor apply the namespace the
// inventories live in: each is a conflict, and nothing of the delivery is
// applied.
func TestAManifestCannotTouchTheSinksRecords(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{InventoryNamespace: ns})
	applyOK(t, s, change("victim", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("victim-a", "1"))}))
	held := inventories(t, ns)
	require.Len(t, held, 1)
	var victimInventory string
	for name := range held {
		victimInventory = name
	}
	for name, manifest := range map[string]string{
		"another's inventory":        configMap(victimInventory, "{}"),
		"one posing as one":          "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fake\n  labels:\n    " + apply.LabelInventory + ": \"true\"\n",
		"the inventories' namespace": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + ns + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.Apply(ctxT(t), change("attacker", "c1", payload.Render{Namespace: ns},
				fstest.MapFS{"x.yaml": file(manifest), "y.yaml": file(configMap("attacker-y", "1"))}))
			require.ErrorIs(t, err, apply.ErrConflict)
			assert.ErrorContains(t, err, "target attacker")
			assert.Nil(t, get(t, configMaps, ns, "attacker-y"), "nothing applied")
			assert.Equal(t, held, inventories(t, ns))
		})
	}
	require.NoError(t, s.Remove(ctxT(t), watcher.Target{ID: "victim"}))
	assert.Empty(t, inventories(t, ns), "the victim's inventory was intact: its removal found it")
}

// A target whose render became empty would have every object pruned: the
// prune is held until the render has stayed empty for the delay, and
// reported as the delivery's error; then it is carried out.
func TestAnEmptyRenderIsHeldBeforeItPrunesEverything(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{InventoryNamespace: ns, EmptyRenderConfirm: 2 * time.Second})
	applyOK(t, s, change("t", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("a", "1")), "b.yaml": file(configMap("b", "1"))}))
	start := time.Now()
	_, err := s.Apply(ctxT(t), change("t", "c2", payload.Render{Namespace: ns}, fstest.MapFS{}))
	require.ErrorContains(t, err, "pruning all 2 of its objects is held")
	assert.NotNil(t, get(t, configMaps, ns, "a"))

	// Rendering something again ends the hold; empty again, it starts anew.
	applyOK(t, s, change("t", "c3", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("a", "3")), "b.yaml": file(configMap("b", "1"))}))
	_, err = s.Apply(ctxT(t), change("t", "c4", payload.Render{Namespace: ns}, fstest.MapFS{}))
	require.ErrorContains(t, err, "held")
	require.Eventually(t, func() bool {
		_, err := s.Apply(ctxT(t), change("t", "c4", payload.Render{Namespace: ns}, fstest.MapFS{}))
		return err == nil
	}, 10*time.Second, 200*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(start), 2*time.Second)
	assert.Nil(t, get(t, configMaps, ns, "a"))
	assert.Nil(t, get(t, configMaps, ns, "b"))
}

// Two targets whose first deliveries render the same new object at once:
// one applies it, the other is refused; never both record it (and one's
// removal delete what the other applies).
func TestTwoTargetsCannotBothClaimANewObject(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{InventoryNamespace: ns, CascadeDelete: true})
	for i := range 5 {
		name := fmt.Sprintf("x%d", i)
		files := fstest.MapFS{"x.yaml": file(configMap(name, "1"))}
		errs := make(chan error, 2)
		for _, id := range []string{"a" + name, "b" + name} {
			go func() {
				_, err := s.Apply(ctxT(t), change(id, "c1", payload.Render{Namespace: ns}, files))
				errs <- err
			}()
		}
		e1, e2 := <-errs, <-errs
		require.True(t, (e1 == nil) != (e2 == nil), "exactly one applies %s: %v, %v", name, e1, e2)
		recorders := 0
		for _, target := range inventories(t, ns) {
			if target == "a"+name || target == "b"+name {
				recorders++
			}
		}
		assert.Equal(t, 1, recorders, "one inventory records %s", name)
	}
}

// An install that gets an instance (an upgrade, examples/controller's
// -name) takes its targets' inventories from before: no conflict with its
// own objects, the inventory moved under its name, its later prune and
// removal working on what it applied then.
func TestAnInventoryFromBeforeInstancesIsTakenOver(t *testing.T) {
	ns := env.Namespace(t)
	before := newSink(t, apply.Config{FieldManager: "ctl", InventoryNamespace: ns, CascadeDelete: true})
	applyOK(t, before, change("gs/web", "c1", payload.Render{Namespace: ns},
		fstest.MapFS{"a.yaml": file(configMap("a", "1")), "b.yaml": file(configMap("b", "1"))}))
	after := newSink(t, apply.Config{FieldManager: "ctl", InventoryNamespace: ns, Instance: "team-one", CascadeDelete: true, EmptyRenderConfirm: -1})
	res := applyOK(t, after, change("gs/web", "c2", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("a", "2"))}))
	assert.Equal(t, apply.Deleted, actions(res)["ConfigMap/"+ns+"/b"], "what it applied before is pruned")
	assert.Equal(t, "2", cmValue(t, ns, "a"))
	held := inventories(t, ns)
	assert.Len(t, held, 1, "moved, not copied")
	ids, err := after.Targets(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"gs/web"}, ids)
	require.NoError(t, after.Remove(ctxT(t), watcher.Target{ID: "gs/web"}))
	assert.Nil(t, get(t, configMaps, ns, "a"))
	assert.Empty(t, inventories(t, ns))
}

// Installs whose inventories live in different namespaces cannot see
// each other's records: an object carrying an owner's label this sink has
// no inventory of is refused, not taken over.
func TestAnObjectOfAnUnknownOwnerIsRefused(t *testing.T) {
	ns, inv1, inv2 := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	one := newSink(t, apply.Config{InventoryNamespace: inv1, Instance: "one"})
	two := newSink(t, apply.Config{InventoryNamespace: inv2, Instance: "two", CascadeDelete: true})
	applyOK(t, one, change("a", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"x.yaml": file(configMap("x", "1"))}))
	_, err := two.Apply(ctxT(t), change("b", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"x.yaml": file(configMap("x", "2"))}))
	require.ErrorIs(t, err, apply.ErrConflict)
	assert.Equal(t, "1", cmValue(t, ns, "x"))
}

// A target that drops a Namespace it applied does not delete it while
// another target's objects are in it (the Namespace's deletion would take
// them); it is forgotten instead. Without other objects in it, it is
// pruned.
func TestANamespaceHoldingAnotherTargetsObjectsIsNotPruned(t *testing.T) {
	inv := env.Namespace(t)
	shared, alone := "shared-"+inv, "alone-"+inv
	namespace := func(name string) string { return "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + name + "\n" }
	s := newSink(t, apply.Config{InventoryNamespace: inv, EmptyRenderConfirm: -1})
	applyOK(t, s, change("a", "c1", payload.Render{}, fstest.MapFS{"ns.yaml": file(namespace(shared)), "ns2.yaml": file(namespace(alone))}))
	applyOK(t, s, change("b", "c1", payload.Render{Namespace: shared}, fstest.MapFS{"x.yaml": file(configMap("x", "1"))}))

	res := applyOK(t, s, change("a", "c2", payload.Render{}, fstest.MapFS{}))
	assert.Equal(t, apply.Skipped, actions(res)["Namespace/"+shared], "b's object is in it")
	assert.Equal(t, apply.Deleted, actions(res)["Namespace/"+alone])
	ns, err := env.Kube.CoreV1().Namespaces().Get(context.Background(), shared, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Nil(t, ns.DeletionTimestamp, "not being deleted")
	t.Cleanup(func() {
		_ = env.Kube.CoreV1().Namespaces().Delete(context.Background(), shared, metav1.DeleteOptions{})
	})
}

// The sweep at start over the deletion budget, with the real apply sink
// and cascade deletion: every inventory's target gone from the set at
// once is held (reported, nothing deleted), and carried out on the
// program's confirmation.
func TestASweepOverTheBudgetIsHeldUntilConfirmed(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1", gittest.File("a/x.yaml", configMap("a", "1")), gittest.File("b/x.yaml", configMap("b", "1")), gittest.File("c/x.yaml", configMap("c", "1")))
	sink := newSink(t, apply.Config{InventoryNamespace: ns, CascadeDelete: true})
	var targets []watcher.Target
	for _, id := range []string{"a", "b", "c"} {
		targets = append(targets, watcher.Target{ID: id, URL: repo.URL(), Path: id, Payload: payload.Render{Namespace: ns}})
	}
	start := func(set ...watcher.Target) (*watcher.Watcher, *watchertest.Observer, func()) {
		obs := watchertest.NewObserver()
		w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithObserver(obs), watcher.WithRemovalBudget(0.5, time.Hour))
		require.NoError(t, w.Route(watchertest.NewSource(set...), sink))
		return w, obs, watchertest.Run(t, w.Run)
	}
	_, obs, stop := start(targets...)
	for range targets {
		delivered(t, obs, c1)
	}
	require.Eventually(t, func() bool { return len(inventories(t, ns)) == 3 }, 10*time.Second, 50*time.Millisecond)
	stop()

	w, obs, _ := start() // a set read successfully, and empty
	e := obs.WaitFor(t, "the sweep held", func(e watcher.Event) bool { return e.Type == watcher.EventRemovalsHeld })
	assert.ErrorContains(t, e.Err, "3 of 3")
	assert.Equal(t, 3, w.Stats().RemovalsHeld)
	// The hold is reported as it is decided; what it prevents, a removal
	// that would delete through the apiserver on the delivery pool, leaves
	// no event when it does not happen, and no later pass is due (the
	// confirmation delay is an hour): its absence is looked for after a
	// window that holds a deletion.
	time.Sleep(time.Second)
	assert.Len(t, inventories(t, ns), 3, "nothing removed")
	assert.Equal(t, "1", cmValue(t, ns, "a"))

	w.ConfirmRemovals()
	for _, id := range []string{"a", "b", "c"} {
		obs.WaitFor(t, id+" removed", watchertest.Is(watcher.EventRemoved, id))
		assert.Nil(t, get(t, configMaps, ns, id), "cascade: %s deleted", id)
	}
	assert.Empty(t, inventories(t, ns))
}
