package apply_test

import (
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

var services = schema.GroupVersionResource{Version: "v1", Resource: "services"}

func service(name, port string) string {
	return "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + name + "\nspec:\n  ports:\n  - port: " + port + "\n"
}

func servicePort(t *testing.T, ns, name string) int64 {
	t.Helper()
	u := get(t, services, ns, name)
	require.NotNil(t, u, "service %s/%s", ns, name)
	ports, _, _ := unstructured.NestedSlice(u.Object, "spec", "ports")
	require.Len(t, ports, 1)
	port, _, _ := unstructured.NestedInt64(ports[0].(map[string]any), "port")
	return port
}

func onlyConfigMaps(gk schema.GroupKind) bool { return gk == schema.GroupKind{Kind: "ConfigMap"} }

// Include says what the program manages (Numaplane's includedResources):
// of a ConfigMap and a Service, with only ConfigMaps included, the
// ConfigMap is applied and the Service left alone, and the Result says so;
// a dry run says the same and writes nothing.
func TestIncludeSkipAppliesOnlyTheIncludedKinds(t *testing.T) {
	ns := env.Namespace(t)
	files := fstest.MapFS{"a.yaml": file(configMap("a", "1")), "svc.yaml": file(service("web", "80"))}
	for _, mode := range []apply.Mode{apply.ModeDryRun, apply.ModeApply} {
		t.Run(string(mode), func(t *testing.T) {
			s := newSink(t, apply.Config{InventoryNamespace: ns, ForceNamespace: true, Mode: mode,
				Include: onlyConfigMaps, IncludeMode: apply.IncludeSkip})
			res := applyOK(t, s, change("skip/"+ns, "c1", payload.Render{Namespace: ns}, files))
			e, ok := res.Find("Service/" + ns + "/web")
			require.True(t, ok, res.String())
			assert.Equal(t, apply.Skipped, e.Action)
			assert.Equal(t, apply.SkipNotIncluded, e.Reason)
			assert.Equal(t, apply.Created, actions(res)["ConfigMap/"+ns+"/a"])
			assert.Contains(t, res.String(), "1 outside the included kinds, left alone: Service/"+ns+"/web")
			assert.Nil(t, get(t, services, ns, "web"), "never created")
			if mode == apply.ModeApply {
				assert.Equal(t, "1", cmValue(t, ns, "a"))
			} else {
				assert.Nil(t, get(t, configMaps, ns, "a"), "a dry run writes nothing")
			}
		})
	}
}

// The list narrowed after an apply: what the target applied of a kind no
// longer included is left alone (neither changed, nor pruned, nor deleted
// by cascade) and stays recorded: included again, it is pruned when the
// target no longer renders it.
func TestIncludeSkipLeavesWhatTheListNoLongerIncludes(t *testing.T) {
	ns := env.Namespace(t)
	var narrowed atomic.Bool
	include := func(gk schema.GroupKind) bool { return onlyConfigMaps(gk) || !narrowed.Load() && gk.Kind == "Service" }
	s := newSink(t, apply.Config{InventoryNamespace: ns, ForceNamespace: true, CascadeDelete: true,
		Include: include, IncludeMode: apply.IncludeSkip})
	id := "narrow/" + ns
	deliver := func(commit string, files fstest.MapFS) *apply.Result {
		return applyOK(t, s, change(id, commit, payload.Render{Namespace: ns}, files))
	}
	onlyA := fstest.MapFS{"a.yaml": file(configMap("a", "1"))}
	deliver("c1", fstest.MapFS{"a.yaml": file(configMap("a", "1")), "svc.yaml": file(service("web", "80"))})
	require.Equal(t, int64(80), servicePort(t, ns, "web"))

	narrowed.Store(true)
	res := deliver("c2", fstest.MapFS{"a.yaml": file(configMap("a", "1")), "svc.yaml": file(service("web", "81"))})
	assert.Equal(t, []apply.ObjectRef{{Version: "v1", Kind: "Service", Namespace: ns, Name: "web"}}, res.SkippedFor(apply.SkipNotIncluded), res.String())
	assert.Equal(t, int64(80), servicePort(t, ns, "web"), "not applied")
	res = deliver("c3", onlyA)
	assert.Len(t, res.SkippedFor(apply.SkipNotIncluded), 1, res.String())
	assert.NotNil(t, get(t, services, ns, "web"), "not pruned")

	narrowed.Store(false)
	res = deliver("c4", onlyA)
	assert.Equal(t, apply.Deleted, actions(res)["Service/"+ns+"/web"], "recorded all along: pruned once included again")
	assert.Nil(t, get(t, services, ns, "web"))

	deliver("c5", fstest.MapFS{"a.yaml": file(configMap("a", "1")), "svc.yaml": file(service("web", "80"))})
	narrowed.Store(true)
	require.NoError(t, s.Remove(ctxT(t), watcher.Target{ID: id}))
	assert.Nil(t, get(t, configMaps, ns, "a"), "deleted by cascade")
	assert.NotNil(t, get(t, services, ns, "web"), "left alone by the cascade")
}

// A render left with only kinds outside the list prunes nothing, so the
// hold on a render that became empty (which guards against pruning
// everything) does not hold it.
func TestIncludeSkipARenderOfOnlyExcludedKindsIsNotHeld(t *testing.T) {
	ns := env.Namespace(t)
	var narrowed atomic.Bool
	include := func(gk schema.GroupKind) bool { return !narrowed.Load() || onlyConfigMaps(gk) }
	s := newSink(t, apply.Config{InventoryNamespace: ns, Include: include, IncludeMode: apply.IncludeSkip})
	files := fstest.MapFS{"svc.yaml": file(service("web", "80"))}
	applyOK(t, s, change("held/"+ns, "c1", payload.Render{Namespace: ns}, files))
	narrowed.Store(true)
	res := applyOK(t, s, change("held/"+ns, "c2", payload.Render{Namespace: ns}, files))
	assert.Len(t, res.SkippedFor(apply.SkipNotIncluded), 1, res.String())
	assert.NotNil(t, get(t, services, ns, "web"))
}
