package apply_test

import (
	"fmt"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Numaplane's way of applying: every namespaced object into the
// destination namespace, its own tracking label, cascade deletion read at
// each removal.
func TestApplyAsNumaplaneDoes(t *testing.T) {
	ns, other := env.Namespace(t), env.Namespace(t)
	const label = "numaplane.numaproj.io/tracking-id"
	cascade := false
	s := newSink(t, apply.Config{InventoryNamespace: ns, ForceNamespace: true, TrackingLabel: label,
		CascadeDeleteFunc: func() bool { return cascade }})
	files := fstest.MapFS{
		"a.yaml": file(configMap("a", "1")),
		"b.yaml": file(fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: %s\n", other)),
	}
	applyOK(t, s, change("np/"+ns, "c1", payload.Render{Namespace: ns}, files))
	b := get(t, configMaps, ns, "b")
	require.NotNil(t, b, "the manifest's namespace gives way to the destination")
	assert.Nil(t, get(t, configMaps, other, "b"))
	assert.NotEmpty(t, b.GetLabels()[label])
	assert.NotContains(t, b.GetLabels(), apply.LabelTarget)

	cascade = true // the configuration changed meanwhile
	require.NoError(t, s.Remove(ctxT(t), watcher.Target{ID: "np/" + ns}))
	assert.Nil(t, get(t, configMaps, ns, "a"), "deleted: cascade is read at the removal")
	assert.Nil(t, get(t, configMaps, ns, "b"))

	_, err := apply.New(env.Config, apply.Config{TrackingLabel: "not a label!"})
	assert.ErrorIs(t, err, apply.ErrInvalidConfig)
}

// An inventory namespace that does not exist is refused before anything is
// applied, with an error that says so, not after every object was.
func TestMissingInventoryNamespaceAppliesNothing(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{InventoryNamespace: "no-such-namespace-" + ns[len(ns)-6:]})
	_, err := s.Apply(ctxT(t), change("inv/"+ns, "c1", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("a", "1"))}))
	require.Error(t, err)
	assert.ErrorContains(t, err, "does not exist")
	assert.Nil(t, get(t, configMaps, ns, "a"), "nothing applied")
}

// An object a renderer marks create-only (Helm's crds/ under
// helm.CRDsCreate) is created when absent and never changed after; the
// mark never reaches the cluster.
func TestCreateOnlyObjects(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{InventoryNamespace: ns})
	once := func(v string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: once\n  annotations: {" + apply.AnnotationCreateOnly + ": \"true\"}\ndata:\n  value: \"" + v + "\"\n"
	}
	res := applyOK(t, s, change("once/"+ns, "c1", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(once("1"))}))
	assert.Equal(t, apply.Created, res.Entries[0].Action)
	live := get(t, configMaps, ns, "once")
	require.NotNil(t, live)
	assert.NotContains(t, live.GetAnnotations(), apply.AnnotationCreateOnly)

	res = applyOK(t, s, change("once/"+ns, "c2", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(once("2"))}))
	assert.Equal(t, apply.Unchanged, res.Entries[0].Action)
	assert.Equal(t, "1", cmValue(t, ns, "once"), "never changed after it was created")
}

// Only the kinds Include allows are applied; an object of another kind
// fails the delivery before anything is applied, naming it.
func TestIncludedKindsOnly(t *testing.T) {
	ns := env.Namespace(t)
	onlyConfigMaps := func(gk schema.GroupKind) bool { return gk == schema.GroupKind{Kind: "ConfigMap"} }
	s := newSink(t, apply.Config{InventoryNamespace: ns, Include: onlyConfigMaps})
	applyOK(t, s, change("inc/"+ns, "c1", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("a", "1"))}))
	_, err := s.Apply(ctxT(t), change("inc/"+ns, "c2", payload.Render{Namespace: ns}, fstest.MapFS{
		"a.yaml": file(configMap("a", "2")), "role.yaml": file(clusterRole("excluded-" + ns))}))
	require.Error(t, err)
	assert.True(t, watcher.IsPermanent(err))
	assert.ErrorContains(t, err, "ClusterRole.rbac.authorization.k8s.io/excluded-"+ns)
	assert.Equal(t, "1", cmValue(t, ns, "a"), "nothing applied")
}
