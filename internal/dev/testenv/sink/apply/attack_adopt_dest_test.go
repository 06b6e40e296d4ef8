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
	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Numaplane applied a ClusterRole for its GitSync team-b/web: labeled
// "web", no owner annotation. After the upgrade (AdoptByValue), the
// GitSync team-a/web, also named web, renders it (a hostile manifest): it
// must not be adopted by team-a/web, which could then delete it. A value
// shared by two GitSyncs tells nothing of which one applied a cluster-scoped
// object.
func TestAttackAdoptByValueClusterScopedOfAnotherGitSyncOfTheSameName(t *testing.T) {
	ns := env.Namespace(t)
	name := "attack-" + ns
	cr := clusterRoleLabeled(t, name, "web")
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(clusterRoles).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	s := newSink(t, apply.Config{InventoryNamespace: ns, TrackingLabel: attackLabel, TrackingValue: byName, AdoptByValue: true})
	c := change("gitsync/team-a/web", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"cr.yaml": file(clusterRole(name))})

	_, err := s.Apply(ctxT(t), c)
	assert.ErrorIs(t, err, apply.ErrConflict, "a cluster-scoped object marked by a shared value alone is not adopted")
	c.To, c.FS = named("c2"), fstest.MapFS{"y.yaml": file(configMap("other", "a"))}
	_, _ = s.Apply(ctxT(t), c)
	live := get(t, clusterRoles, "", name)
	require.NotNil(t, live, "team-a/web does not delete what Numaplane applied for team-b/web")
	assert.Equal(t, cr.GetUID(), live.GetUID())
}

// The same with a ConfigMap Numaplane applied for team-b/web in its
// destination namespace: team-a/web's manifest names that namespace (the
// sink does not force its own): not adopted. (Only in the target's own
// destination can a value alone say the object was its GitSync's.)
func TestAttackAdoptByValueInAnotherGitSyncsDestination(t *testing.T) {
	inv, destA, destB := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	cm := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(configMap("x", "b")), &cm.Object))
	cm.SetLabels(map[string]string{attackLabel: "web"})
	_, err := env.Dynamic.Resource(configMaps).Namespace(destB).Create(context.Background(), cm, metav1.CreateOptions{})
	require.NoError(t, err)
	s := newSink(t, apply.Config{InventoryNamespace: inv, TrackingLabel: attackLabel, TrackingValue: byName, AdoptByValue: true})
	hostile := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: %s\ndata:\n  value: evil\n", destB)
	c := change("gitsync/team-a/web", "c1", payload.Render{Namespace: destA}, fstest.MapFS{"x.yaml": file(hostile)})

	_, err = s.Apply(ctxT(t), c)
	assert.ErrorIs(t, err, apply.ErrConflict)
	assert.Equal(t, "b", cmValue(t, destB, "x"), "not taken over")
}
