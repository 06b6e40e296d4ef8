package apply_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// numaplaneSink applies as Numaplane does, its tracking label's value the
// GitSync's name.
func numaplaneSink(t *testing.T, inventoryNS string) *apply.Sink {
	return newSink(t, apply.Config{InventoryNamespace: inventoryNS, ForceNamespace: true, CascadeDelete: true,
		TrackingLabel: gitsync.TrackingLabel, TrackingValue: gitsync.TrackingValue})
}

// deleteClusterRole deletes the cluster-scoped leftover of a test, gone
// already when the test ended well.
func deleteClusterRole(t *testing.T, name string) {
	err := env.Dynamic.Resource(clusterRoles).Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete ClusterRole %s: %v", name, err)
	}
}

func trackingValue(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	require.NotNil(t, u)
	return u.GetLabels()[gitsync.TrackingLabel]
}

// Two GitSyncs named web in two namespaces share the value "web": each
// applies its own; the one's prune and cascade deletion leave what the
// other applied, even an object the other created where the one had it
// before.
func TestSharedTrackingValueLeavesTheOthersObjects(t *testing.T) {
	inv, nsA, nsB := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	s := numaplaneSink(t, inv)
	a, b := gitsync.TargetID(nsA, "web"), gitsync.TargetID(nsB, "web")
	role := "shared-" + nsA
	withRole := fstest.MapFS{"a.yaml": file(configMap("a", "1")), "role.yaml": file(clusterRole(role))}
	applyOK(t, s, change(a, "c1", payload.Render{Namespace: nsA}, withRole))
	applyOK(t, s, change(b, "c1", payload.Render{Namespace: nsB}, fstest.MapFS{"a.yaml": file(configMap("a", "1"))}))
	assert.Equal(t, "web", trackingValue(t, get(t, configMaps, nsA, "a")))
	assert.Equal(t, "web", trackingValue(t, get(t, configMaps, nsB, "a")), "kubectl get -l tracking-id=web finds both")

	// A person deletes the ClusterRole; B then creates it, as its own.
	require.NoError(t, env.Dynamic.Resource(clusterRoles).Delete(context.Background(), role, metav1.DeleteOptions{}))
	applyOK(t, s, change(b, "c2", payload.Render{Namespace: nsB}, withRole))
	t.Cleanup(func() { deleteClusterRole(t, role) })

	res := applyOK(t, s, change(a, "c2", payload.Render{Namespace: nsA}, fstest.MapFS{"a.yaml": file(configMap("a", "2"))}))
	assert.Equal(t, apply.Skipped, actions(res)["ClusterRole.rbac.authorization.k8s.io/"+role], "A's prune leaves B's")
	assert.NotNil(t, get(t, clusterRoles, "", role))

	require.NoError(t, s.Remove(ctxT(t), watcher.Target{ID: a}))
	assert.Nil(t, get(t, configMaps, nsA, "a"), "A's own deleted")
	assert.NotNil(t, get(t, configMaps, nsB, "a"), "B's left")
	assert.NotNil(t, get(t, clusterRoles, "", role), "B's left")

	require.NoError(t, s.Remove(ctxT(t), watcher.Target{ID: b}))
	assert.Nil(t, get(t, configMaps, nsB, "a"))
	assert.Nil(t, get(t, clusterRoles, "", role), "B's own deleted")
}

// The guard goes by who applied an object, not by the value it carries:
// under a shared value it refuses another target's object, another
// program's and another install's, and applies nothing.
func TestSharedTrackingValueGuard(t *testing.T) {
	inv, nsA, nsB := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	s := numaplaneSink(t, inv)
	a, b := gitsync.TargetID(nsA, "web"), gitsync.TargetID(nsB, "web")
	role := "shared-" + nsA
	t.Cleanup(func() { deleteClusterRole(t, role) })
	applyOK(t, s, change(a, "c1", payload.Render{Namespace: nsA}, fstest.MapFS{"role.yaml": file(clusterRole(role))}))

	refused := func(t *testing.T, s *apply.Sink, id, ns string, files fstest.MapFS) {
		t.Helper()
		files["own.yaml"] = file(configMap("own", "1"))
		_, err := s.Apply(ctxT(t), change(id, "c1", payload.Render{Namespace: ns}, files))
		require.ErrorIs(t, err, apply.ErrConflict)
		assert.ErrorContains(t, err, "target "+id)
		assert.Nil(t, get(t, configMaps, ns, "own"), "nothing applied")
	}
	t.Run("another target's", func(t *testing.T) {
		refused(t, s, b, nsB, fstest.MapFS{"role.yaml": file(clusterRole(role))})
	})
	t.Run("another program's", func(t *testing.T) {
		cm := &unstructured.Unstructured{}
		cm.SetAPIVersion("v1")
		cm.SetKind("ConfigMap")
		cm.SetName("theirs")
		cm.SetLabels(map[string]string{gitsync.TrackingLabel: "web"})
		_, err := env.Dynamic.Resource(configMaps).Namespace(nsB).Create(context.Background(), cm, metav1.CreateOptions{})
		require.NoError(t, err)
		refused(t, s, b, nsB, fstest.MapFS{"theirs.yaml": file(configMap("theirs", "1"))})
		assert.Empty(t, cmValue(t, nsB, "theirs"), "left as it was")
	})
	t.Run("another install's", func(t *testing.T) {
		other := newSink(t, apply.Config{InventoryNamespace: env.Namespace(t), Instance: "two", ForceNamespace: true,
			TrackingLabel: gitsync.TrackingLabel, TrackingValue: gitsync.TrackingValue})
		applyOK(t, other, change(b, "c1", payload.Render{Namespace: nsB}, fstest.MapFS{"installs.yaml": file(configMap("installs", "1"))}))
		refused(t, s, b, nsB, fstest.MapFS{"installs.yaml": file(configMap("installs", "2"))})
		assert.Equal(t, "1", cmValue(t, nsB, "installs"), "left as it was")
	})
}

// A program that moves from the default value (the digest) to names:
// the next apply relabels the target's objects, and what was applied
// under the digest is still pruned, and cascade-deleted.
func TestTrackingValueChanges(t *testing.T) {
	ns := env.Namespace(t)
	id := gitsync.TargetID(ns, "web")
	before := newSink(t, apply.Config{InventoryNamespace: ns, ForceNamespace: true, TrackingLabel: gitsync.TrackingLabel})
	applyOK(t, before, change(id, "c1", payload.Render{Namespace: ns}, fstest.MapFS{
		"a.yaml": file(configMap("a", "1")), "b.yaml": file(configMap("b", "1")), "c.yaml": file(configMap("c", "1"))}))
	digest := trackingValue(t, get(t, configMaps, ns, "a"))
	require.NotEqual(t, "web", digest)

	after := numaplaneSink(t, ns)
	res := applyOK(t, after, change(id, "c2", payload.Render{Namespace: ns}, fstest.MapFS{
		"a.yaml": file(configMap("a", "1")), "c.yaml": file(configMap("c", "1"))}))
	assert.Equal(t, apply.Deleted, actions(res)["ConfigMap/"+ns+"/b"], "applied under the digest, pruned under the name")
	assert.Nil(t, get(t, configMaps, ns, "b"))
	assert.Equal(t, "web", trackingValue(t, get(t, configMaps, ns, "a")), "relabelled")

	// c is labelled by the digest again behind the sink's back, as a
	// delivery that failed half-way leaves it: still the target's own.
	c := get(t, configMaps, ns, "c")
	c.SetLabels(map[string]string{gitsync.TrackingLabel: digest})
	c.SetAnnotations(nil)
	_, err := env.Dynamic.Resource(configMaps).Namespace(ns).Update(context.Background(), c, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, after.Remove(ctxT(t), watcher.Target{ID: id}))
	assert.Nil(t, get(t, configMaps, ns, "a"), "cascade-deleted")
	assert.Nil(t, get(t, configMaps, ns, "c"), "cascade-deleted under the old value")
}

// A value that is not a label value fails the delivery for good, naming
// the target and the value; nothing is applied.
func TestTrackingValueMustBeALabelValue(t *testing.T) {
	ns := env.Namespace(t)
	for _, v := range []string{"", "not a label value!", "-web"} {
		s := newSink(t, apply.Config{InventoryNamespace: ns, TrackingValue: func(watcher.Target) string { return v }})
		_, err := s.Apply(ctxT(t), change("bad", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("a", "1"))}))
		require.Error(t, err)
		assert.True(t, watcher.IsPermanent(err), v)
		assert.ErrorIs(t, err, apply.ErrInvalidConfig)
		assert.ErrorContains(t, err, `target bad: the tracking value "`+v+`"`)
		assert.Nil(t, get(t, configMaps, ns, "a"), "nothing applied")
	}
}

// A value chosen to be another target's digest (the default value) makes
// no one that target: each target's objects stay its own, refused to the
// other, and the one's cascade deletion leaves the other's.
func TestATrackingValueCannotPoseAsAnotherTarget(t *testing.T) {
	ns := env.Namespace(t)
	plain := newSink(t, apply.Config{InventoryNamespace: ns, CascadeDelete: true})
	applyOK(t, plain, change("victim", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"v.yaml": file(configMap("v", "1"))}))
	victims := get(t, configMaps, ns, "v").GetLabels()[apply.LabelTarget]
	poser := newSink(t, apply.Config{InventoryNamespace: ns, CascadeDelete: true,
		TrackingValue: func(watcher.Target) string { return victims }})
	applyOK(t, poser, change("poser", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"p.yaml": file(configMap("p", "1"))}))
	assert.Equal(t, victims, get(t, configMaps, ns, "p").GetLabels()[apply.LabelTarget], "the same value")

	_, err := poser.Apply(ctxT(t), change("poser", "c2", payload.Render{Namespace: ns}, fstest.MapFS{
		"p.yaml": file(configMap("p", "1")), "v.yaml": file(configMap("v", "poser"))}))
	require.ErrorIs(t, err, apply.ErrConflict, "the victim's object is refused to the poser")
	_, err = plain.Apply(ctxT(t), change("victim", "c2", payload.Render{Namespace: ns}, fstest.MapFS{
		"v.yaml": file(configMap("v", "1")), "p.yaml": file(configMap("p", "victim"))}))
	require.ErrorIs(t, err, apply.ErrConflict, "and the poser's to the victim")

	require.NoError(t, poser.Remove(ctxT(t), watcher.Target{ID: "poser"}))
	assert.Nil(t, get(t, configMaps, ns, "p"))
	assert.Equal(t, "1", cmValue(t, ns, "v"), "the victim's left")
}

// A manifest cannot name its object's owner: the sink sets
// AnnotationOwner where the value is not the digest and takes it off where
// it is, so that no target's object poses as another's.
func TestAManifestCannotNameItsOwner(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{InventoryNamespace: ns, CascadeDelete: true})
	applyOK(t, s, change("victim", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"v.yaml": file(configMap("v", "1"))}))
	victims := get(t, configMaps, ns, "v").GetLabels()[apply.LabelTarget]
	posing := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: p\n  annotations: {" + apply.AnnotationOwner + ": " + victims + "}\n"
	applyOK(t, s, change("poser", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"p.yaml": file(posing)}))
	assert.NotContains(t, get(t, configMaps, ns, "p").GetAnnotations(), apply.AnnotationOwner)
	named := newSink(t, apply.Config{InventoryNamespace: ns, TrackingValue: func(watcher.Target) string { return "web" }})
	applyOK(t, named, change("poser", "c2", payload.Render{Namespace: ns}, fstest.MapFS{"p.yaml": file(posing)}))
	assert.NotEqual(t, victims, get(t, configMaps, ns, "p").GetAnnotations()[apply.AnnotationOwner])

	_, err := s.Apply(ctxT(t), change("victim", "c2", payload.Render{Namespace: ns}, fstest.MapFS{
		"v.yaml": file(configMap("v", "1")), "p.yaml": file(configMap("p", "victim"))}))
	require.ErrorIs(t, err, apply.ErrConflict, "the poser's object stays the poser's")
}

// A program that moves from Numaplane, which marks a GitSync's objects by
// its name alone, takes them over with AdoptByValue: the object its
// manifest renders and that carries its value, and no owner, is applied,
// owned and pruned as its own. Another target's, under the same value,
// is still refused; so is one marked with another value.
func TestAdoptByValueTakesOverWhatTheValueAloneMarked(t *testing.T) {
	inv, ns := env.Namespace(t), env.Namespace(t)
	s := newSink(t, apply.Config{InventoryNamespace: inv, ForceNamespace: true, CascadeDelete: true, AdoptByValue: true,
		TrackingLabel: gitsync.TrackingLabel, TrackingValue: gitsync.TrackingValue})
	before := func(name, value string) {
		cm := &unstructured.Unstructured{}
		cm.SetAPIVersion("v1")
		cm.SetKind("ConfigMap")
		cm.SetName(name)
		cm.SetLabels(map[string]string{gitsync.TrackingLabel: value})
		_, err := env.Dynamic.Resource(configMaps).Namespace(ns).Create(context.Background(), cm, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	before("web-config", "web")
	before("web-old", "web")
	id := gitsync.TargetID(ns, "web")
	applyOK(t, s, change(id, "c1", payload.Render{Namespace: ns}, fstest.MapFS{
		"a.yaml": file(configMap("web-config", "1")), "b.yaml": file(configMap("web-old", "1"))}))
	assert.Equal(t, "1", cmValue(t, ns, "web-config"), "taken over")
	assert.NotEmpty(t, get(t, configMaps, ns, "web-config").GetAnnotations()[apply.AnnotationOwner], "owned now")
	res := applyOK(t, s, change(id, "c2", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("web-config", "2"))}))
	assert.Equal(t, apply.Deleted, actions(res)["ConfigMap/"+ns+"/web-old"], "pruned as its own")

	before("api-config", "api")
	_, err := s.Apply(ctxT(t), change(id, "c3", payload.Render{Namespace: ns}, fstest.MapFS{
		"a.yaml": file(configMap("web-config", "3")), "c.yaml": file(configMap("api-config", "1"))}))
	require.ErrorIs(t, err, apply.ErrConflict, "another value: another's")
	other := gitsync.TargetID(env.Namespace(t), "web")
	_, err = s.Apply(ctxT(t), change(other, "c1", payload.Render{Namespace: ns}, fstest.MapFS{"a.yaml": file(configMap("web-config", "9"))}))
	require.ErrorIs(t, err, apply.ErrConflict, "another target's under the same value: refused")
	assert.Equal(t, "2", cmValue(t, ns, "web-config"))
}
