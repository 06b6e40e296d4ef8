package apply_test

import (
	"context"
	"fmt"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

func TestNamespaceOnlyOnNamespacedKinds(t *testing.T) {
	ns, other := env.Namespace(t), env.Namespace(t)
	role := "reader-" + ns
	s := newSink(t, apply.Config{})
	res := applyOK(t, s, change("ns/"+ns, "c1", payload.Render{Namespace: ns}, fstest.MapFS{
		"a.yaml":    file(configMap("a", "1")),
		"b.yaml":    file(fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: %s\n", other)),
		"role.yaml": file(clusterRole(role)),
	}))
	assert.Equal(t, map[string]apply.Action{
		"ConfigMap/" + ns + "/a":                        apply.Created,
		"ConfigMap/" + other + "/b":                     apply.Created,
		"ClusterRole.rbac.authorization.k8s.io/" + role: apply.Created,
	}, actions(res))
	assert.Equal(t, "1", cmValue(t, ns, "a"), "a namespaced object without a namespace gets the destination")
	assert.NotNil(t, get(t, configMaps, other, "b"), "an explicit namespace is kept")
	cr := get(t, clusterRoles, "", role)
	require.NotNil(t, cr, "a cluster-scoped object is applied without a namespace")
	assert.Empty(t, cr.GetNamespace())
	assert.NotEmpty(t, cr.GetLabels()[apply.LabelTarget], "every applied object carries the target label")
}

func TestCRDAndCustomResourceInOneDelivery(t *testing.T) {
	ns := env.Namespace(t)
	group := ns + ".modwatch.test"
	crd := fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.%[1]s
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
`, group)
	cr := fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 3\n", group)
	s := newSink(t, apply.Config{})
	res := applyOK(t, s, change("crd/"+ns, "c1", payload.Render{Namespace: ns}, fstest.MapFS{
		"crd.yaml":    file(crd),
		"widget.yaml": file(cr),
	}))
	assert.Equal(t, map[string]apply.Action{
		"CustomResourceDefinition.apiextensions.k8s.io/widgets." + group: apply.Created,
		"Widget." + group + "/" + ns + "/w":                              apply.Created,
	}, actions(res))
	w := get(t, schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}, ns, "w")
	require.NotNil(t, w)
	size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size")
	assert.Equal(t, int64(3), size)
}

// resourceVersions returns the resourceVersion of each ConfigMap in ns.
func resourceVersions(t *testing.T, ns string) map[string]string {
	t.Helper()
	list, err := env.Kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	out := map[string]string{}
	for _, cm := range list.Items {
		out[cm.Name] = cm.ResourceVersion
	}
	return out
}

func TestDriftIsCorrectedAndNoDriftWritesNothing(t *testing.T) {
	ns := env.Namespace(t)
	// The inventory lives in the test namespace, so that its resourceVersion
	// is checked with the objects'.
	s := newSink(t, apply.Config{InventoryNamespace: ns})
	files := fstest.MapFS{"a.yaml": file(configMap("a", "1")), "b.yaml": file(configMap("b", "1"))}
	applyOK(t, s, change("drift/"+ns, "c1", payload.Render{Namespace: ns}, files))
	before := resourceVersions(t, ns)
	require.Len(t, before, 3, "a, b and the inventory")

	resync := change("drift/"+ns, "c1", payload.Render{Namespace: ns}, files)
	resync.Reason, resync.From = watcher.ReasonResync, named("c1")
	res := applyOK(t, s, resync)
	assert.Equal(t, 2, res.Count(apply.Unchanged), res.String())
	assert.Equal(t, before, resourceVersions(t, ns), "a resync without drift writes nothing")

	// Someone edits a.
	cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "a", metav1.GetOptions{})
	require.NoError(t, err)
	cm.Data["value"] = "edited"
	_, err = env.Kube.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
	require.NoError(t, err)
	edited := resourceVersions(t, ns)

	res = applyOK(t, s, resync)
	assert.Equal(t, apply.Configured, actions(res)["ConfigMap/"+ns+"/a"])
	assert.Equal(t, apply.Unchanged, actions(res)["ConfigMap/"+ns+"/b"])
	assert.Equal(t, "1", cmValue(t, ns, "a"), "drift is corrected")
	after := resourceVersions(t, ns)
	assert.NotEqual(t, edited["a"], after["a"])
	delete(after, "a")
	delete(edited, "a")
	assert.Equal(t, edited, after, "only the drifted object is written")
}

func TestConflicts(t *testing.T) {
	ns := env.Namespace(t)
	// Another manager owns data.value.
	other := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "a", "namespace": ns},
		"data":     map[string]any{"value": "theirs"},
	}}
	c, err := client.New(env.Config, client.Options{})
	require.NoError(t, err)
	require.NoError(t, c.Apply(ctxT(t), client.ApplyConfigurationFromUnstructured(other), client.FieldOwner("someone-else")))
	files := fstest.MapFS{"a.yaml": file(configMap("a", "ours"))}

	report := newSink(t, apply.Config{Conflicts: apply.ConflictReport, FieldManager: "modwatch-report"})
	res, err := report.Apply(ctxT(t), change("conflict/"+ns, "c1", payload.Render{Namespace: ns}, files))
	require.Error(t, err)
	e, ok := res.Find("ConfigMap/" + ns + "/a")
	require.True(t, ok)
	assert.Equal(t, apply.Failed, e.Action)
	assert.ErrorContains(t, e.Err, "conflict")
	assert.Equal(t, "theirs", cmValue(t, ns, "a"), "a reported conflict changes nothing")

	force := newSink(t, apply.Config{})
	res = applyOK(t, force, change("conflict/"+ns, "c1", payload.Render{Namespace: ns}, files))
	assert.Equal(t, apply.Configured, actions(res)["ConfigMap/"+ns+"/a"])
	assert.Equal(t, "ours", cmValue(t, ns, "a"), "force takes the field over")
}

func TestDryRunAndDiffWriteNothing(t *testing.T) {
	ns := env.Namespace(t)
	id := "plan/" + ns
	s := newSink(t, apply.Config{InventoryNamespace: ns})
	applyOK(t, s, change(id, "c1", payload.Render{Namespace: ns}, fstest.MapFS{
		"a.yaml": file(configMap("a", "1")), "gone.yaml": file(configMap("gone", "1")),
	}))
	before := resourceVersions(t, ns)
	next := fstest.MapFS{"a.yaml": file(configMap("a", "2")), "new.yaml": file(configMap("new", "1"))}

	for _, mode := range []apply.Mode{apply.ModeDryRun, apply.ModeDiff} {
		t.Run(string(mode), func(t *testing.T) {
			plan := newSink(t, apply.Config{InventoryNamespace: ns, Mode: mode})
			res := applyOK(t, plan, change(id, "c2", payload.Render{Namespace: ns}, next))
			assert.Equal(t, map[string]apply.Action{
				"ConfigMap/" + ns + "/a":    apply.Configured,
				"ConfigMap/" + ns + "/new":  apply.Created,
				"ConfigMap/" + ns + "/gone": apply.Deleted,
			}, actions(res))
			e, _ := res.Find("ConfigMap/" + ns + "/a")
			if mode == apply.ModeDiff {
				require.NotNil(t, e.Live)
				require.NotNil(t, e.Merged)
				live, _, _ := unstructured.NestedString(e.Live.Object, "data", "value")
				merged, _, _ := unstructured.NestedString(e.Merged.Object, "data", "value")
				assert.Equal(t, []string{"1", "2"}, []string{live, merged})
			} else {
				assert.Nil(t, e.Live)
			}
			assert.Equal(t, before, resourceVersions(t, ns), "%s writes nothing", mode)
			require.NoError(t, plan.Remove(ctxT(t), watcher.Target{ID: id}))
			assert.Equal(t, before, resourceVersions(t, ns), "%s removes nothing", mode)
		})
	}
}

func TestRemove(t *testing.T) {
	ns := env.Namespace(t)
	files := fstest.MapFS{"a.yaml": file(configMap("a", "1")), "role.yaml": file(clusterRole("remove-" + ns))}

	keep := newSink(t, apply.Config{InventoryNamespace: ns})
	applyOK(t, keep, change("keep/"+ns, "c1", payload.Render{Namespace: ns}, files))
	require.Len(t, resourceVersions(t, ns), 2)
	require.NoError(t, keep.Remove(ctxT(t), watcher.Target{ID: "keep/" + ns}))
	assert.Equal(t, []string{"a"}, keys(resourceVersions(t, ns)), "without cascade the objects stay and the inventory goes")
	assert.NotNil(t, get(t, clusterRoles, "", "remove-"+ns))

	// What a removal without cascade left keeps its owner's label: another
	// target may not take it silently.
	cascade := newSink(t, apply.Config{InventoryNamespace: ns, CascadeDelete: true})
	_, err := cascade.Apply(ctxT(t), change("cascade/"+ns, "c1", payload.Render{Namespace: ns}, files))
	require.ErrorIs(t, err, apply.ErrConflict)
	assert.ErrorContains(t, err, "an owner this sink has no inventory of")
	files = fstest.MapFS{"a.yaml": file(configMap("a2", "1")), "role.yaml": file(clusterRole("remove2-" + ns))}
	applyOK(t, cascade, change("cascade/"+ns, "c1", payload.Render{Namespace: ns}, files))
	require.NoError(t, cascade.Remove(ctxT(t), watcher.Target{ID: "cascade/" + ns}))
	assert.Equal(t, []string{"a"}, keys(resourceVersions(t, ns)), "cascade deletes its objects and its inventory")
	assert.Nil(t, get(t, clusterRoles, "", "remove2-"+ns))
}

func TestAnObjectAnotherTargetAppliedIsRefused(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{})
	applyOK(t, s, change("first/"+ns, "c1", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("a", "1"))}))
	// A second target renders the same object: a conflict naming both,
	// and nothing of its delivery applied.
	_, err := s.Apply(ctxT(t), change("second/"+ns, "c1", payload.Render{Namespace: ns},
		fstest.MapFS{"a.yaml": file(configMap("a", "2")), "b.yaml": file(configMap("b", "2"))}))
	require.ErrorIs(t, err, apply.ErrConflict)
	assert.ErrorContains(t, err, "target second/"+ns+": ConfigMap/"+ns+"/a is applied by target first/"+ns+" (its inventory")
	assert.Equal(t, "1", cmValue(t, ns, "a"))
	assert.Nil(t, get(t, configMaps, ns, "b"), "nothing of the refused delivery applied")
	// The first target's later removal still prunes what is its own.
	res := applyOK(t, s, change("first/"+ns, "c2", payload.Render{Namespace: ns}, fstest.MapFS{"c.yaml": file(configMap("c", "1"))}))
	assert.Equal(t, apply.Deleted, actions(res)["ConfigMap/"+ns+"/a"])
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestNewCommitChecksOnlyChangedObjects(t *testing.T) {
	for _, always := range []bool{false, true} {
		t.Run(fmt.Sprintf("AlwaysCheckDrift=%v", always), func(t *testing.T) {
			ns := env.Namespace(t)
			s := newSink(t, apply.Config{AlwaysCheckDrift: always})
			id := "changed/" + ns
			applyOK(t, s, change(id, "c1", payload.Render{Namespace: ns}, fstest.MapFS{
				"a.yaml": file(configMap("a", "1")), "b.yaml": file(configMap("b", "1")),
			}))
			cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "b", metav1.GetOptions{})
			require.NoError(t, err)
			cm.Data["value"] = "edited"
			_, err = env.Kube.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{})
			require.NoError(t, err)

			next := change(id, "c2", payload.Render{Namespace: ns}, fstest.MapFS{
				"a.yaml": file(configMap("a", "2")), "b.yaml": file(configMap("b", "1")),
			})
			next.Reason, next.From = watcher.ReasonNewCommit, named("c1")
			res := applyOK(t, s, next)
			assert.Equal(t, apply.Configured, actions(res)["ConfigMap/"+ns+"/a"])
			assert.Equal(t, "2", cmValue(t, ns, "a"))
			if always {
				assert.Equal(t, apply.Configured, actions(res)["ConfigMap/"+ns+"/b"])
				assert.Equal(t, "1", cmValue(t, ns, "b"), "every object is checked for drift")
				return
			}
			assert.Equal(t, apply.Unchanged, actions(res)["ConfigMap/"+ns+"/b"])
			assert.Equal(t, "edited", cmValue(t, ns, "b"), "an object the commit did not change is not checked")
			resync := next
			resync.Reason, resync.From = watcher.ReasonResync, named("c2")
			res = applyOK(t, s, resync)
			assert.Equal(t, apply.Configured, actions(res)["ConfigMap/"+ns+"/b"])
			assert.Equal(t, "1", cmValue(t, ns, "b"), "the resync corrects it")
		})
	}
}

func TestPruneCanBeTurnedOff(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{DisablePrune: true, InventoryNamespace: ns})
	id := "noprune/" + ns
	applyOK(t, s, change(id, "c1", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("a", "1")), "b.yaml": file(configMap("b", "1"))}))
	next := change(id, "c2", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("a", "1"))})
	next.Reason = watcher.ReasonNewCommit
	res := applyOK(t, s, next)
	assert.Equal(t, map[string]apply.Action{"ConfigMap/" + ns + "/a": apply.Unchanged}, actions(res), "nothing is pruned")
	assert.Equal(t, "1", cmValue(t, ns, "b"), "the object gone from git stays")

	// It is forgotten: turning prune back on does not delete it.
	pruning := newSink(t, apply.Config{InventoryNamespace: ns, EmptyRenderConfirm: -1})
	last := change(id, "c3", payload.Render{Namespace: ns}, fstest.MapFS{})
	last.Reason = watcher.ReasonNewCommit
	res = applyOK(t, pruning, last)
	assert.Equal(t, map[string]apply.Action{"ConfigMap/" + ns + "/a": apply.Deleted}, actions(res))
	assert.Equal(t, "1", cmValue(t, ns, "b"))
}

// A source with a payload of its own says how it is rendered through
// Config.SpecFunc.
func TestSpecFunc(t *testing.T) {
	ns := env.Namespace(t)
	type tenant struct{ Namespace string }
	s := newSink(t, apply.Config{SpecFunc: func(tg watcher.Target) (payload.Render, error) {
		return payload.Render{Namespace: tg.Payload.(tenant).Namespace}, nil
	}})
	c := change("tenant/"+ns, "c1", payload.Render{}, fstest.MapFS{"a.yaml": file(configMap("from-payload", "1"))})
	c.Target.Payload = tenant{Namespace: ns}
	applyOK(t, s, c)
	assert.Equal(t, "1", cmValue(t, ns, "from-payload"), "in the namespace the payload names")
}
