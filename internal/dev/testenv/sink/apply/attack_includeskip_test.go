package apply_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher/payload"
)

// includeToggle is an Include of every kind, ConfigMaps while on.
type includeToggle struct{ on atomic.Bool }

func (i *includeToggle) include(gk schema.GroupKind) bool {
	return gk.Group != "" || gk.Kind != "ConfigMap" || i.on.Load()
}

// nsAndConfigMap renders Namespace n and ConfigMap x in it.
func nsAndConfigMap(n string) fstest.MapFS {
	return fstest.MapFS{
		"ns.yaml": file(fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", n)),
		"x.yaml":  file(fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: %s\ndata:\n  value: a\n", n)),
	}
}

func deleting(t *testing.T, n string) bool {
	t.Helper()
	u := get(t, namespaces, "", n)
	return u == nil || u.GetDeletionTimestamp() != nil
}

// Under IncludeSkip, a ConfigMap the target applied while ConfigMaps were
// included is left alone once they are not: "not pruned, not deleted by
// cascade". The Namespace it is in, which the target applied too, must
// not be deleted with it (by the target's prune, or by its cascade
// removal), as it is not when it holds another target's objects.
func TestAttackIncludeSkipNamespaceHoldingALeftAloneObject(t *testing.T) {
	for _, removal := range []string{"prune", "cascade"} {
		t.Run(removal, func(t *testing.T) {
			ns := env.Namespace(t)
			n := ns + "-n"
			t.Cleanup(func() { _ = env.Kube.CoreV1().Namespaces().Delete(context.Background(), n, metav1.DeleteOptions{}) })
			inc := &includeToggle{}
			inc.on.Store(true)
			s := newSink(t, apply.Config{InventoryNamespace: ns, Include: inc.include, IncludeMode: apply.IncludeSkip,
				CascadeDelete: true, EmptyRenderConfirm: -1})
			c := change("apps", "c1", payload.Render{Namespace: ns}, nsAndConfigMap(n))
			applyOK(t, s, c)
			inc.on.Store(false) // ConfigMaps are left alone from now on

			if removal == "prune" {
				c.To, c.FS = named("c2"), fstest.MapFS{}
				_, _ = s.Apply(ctxT(t), c)
			} else {
				_ = s.Remove(ctxT(t), c.Target)
			}
			require.NotNil(t, get(t, configMaps, n, "x"))
			assert.False(t, deleting(t, n), "the Namespace holding x, which IncludeSkip leaves alone, is not deleted")
		})
	}
}

// Two installs (instances p and q) of one program share the inventory
// namespace and each has a target named "apps". p's Namespace holds q's
// ConfigMap: p's prune of it must not delete q's object with it
// (containsOthers went by target ID, which installs may share).
func TestAttackNamespacePruneSparesAnotherInstallsTargetOfTheSameID(t *testing.T) {
	ns := env.Namespace(t)
	n := ns + "-n"
	t.Cleanup(func() { _ = env.Kube.CoreV1().Namespaces().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	p := newSink(t, apply.Config{InventoryNamespace: ns, Instance: "p", EmptyRenderConfirm: -1})
	q := newSink(t, apply.Config{InventoryNamespace: ns, Instance: "q"})
	files := nsAndConfigMap(n)
	cp := change("apps", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"ns.yaml": files["ns.yaml"]})
	cq := change("apps", "c1", payload.Render{Namespace: ns}, fstest.MapFS{"x.yaml": files["x.yaml"]})
	applyOK(t, p, cp)
	applyOK(t, q, cq)

	cp.To, cp.FS = named("c2"), fstest.MapFS{}
	_, _ = p.Apply(ctxT(t), cp)
	assert.False(t, deleting(t, n), "p's prune does not delete the Namespace that holds q's object")
}
