package apply_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Attacks on ownership: each says the scenario, and what must hold.

const attackLabel = "example.com/tracking-id"

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// byName is Numaplane's kind of tracking value: the last part of the
// target's ID, shared by targets of one name.
func byName(t watcher.Target) string { return path.Base(t.ID) }

// resync is c delivered again, as a resync does (every object checked).
func resync(c watcher.Change) watcher.Change {
	c.Reason = watcher.ReasonResync
	return c
}

func ownerAnnotation(t *testing.T, gvr schema.GroupVersionResource, ns, name string) string {
	t.Helper()
	u := get(t, gvr, ns, name)
	require.NotNil(t, u, "%s %s/%s", gvr.Resource, ns, name)
	return u.GetAnnotations()[apply.AnnotationOwner]
}

// clusterRoleLabeled creates the ClusterRole name as another program
// would: marked by the tracking label's value alone.
func clusterRoleLabeled(t *testing.T, name, value string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(clusterRole(name)), &obj.Object))
	obj.SetLabels(map[string]string{attackLabel: value})
	created, err := env.Dynamic.Resource(clusterRoles).Create(context.Background(), obj, metav1.CreateOptions{})
	require.NoError(t, err)
	return created
}

// A hostile manifest of B names A's object and marks it as A's (the
// tracking label's value and A's owner annotation): refused, and a new
// object of B's carrying A's annotation is B's.
func TestAttackManifestForgesOwnership(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{InventoryNamespace: ns, TrackingLabel: attackLabel, TrackingValue: byName})
	rs := payload.Render{Namespace: ns}
	applyOK(t, s, change("gitsync/team-a/web", "c1", rs, fstest.MapFS{"x.yaml": file(configMap("x", "a"))}))
	aOwner := ownerAnnotation(t, configMaps, ns, "x")
	forged := func(name string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  labels: {%q: web}\n  annotations: {%q: %q}\ndata:\n  value: evil\n",
			name, attackLabel, apply.AnnotationOwner, aOwner)
	}
	b := change("gitsync/team-b/web", "c1", rs, fstest.MapFS{"x.yaml": file(forged("x"))})
	_, err := s.Apply(ctxT(t), b)
	assert.ErrorIs(t, err, apply.ErrConflict)
	assert.Equal(t, "a", cmValue(t, ns, "x"))

	b.FS = fstest.MapFS{"z.yaml": file(forged("z"))}
	applyOK(t, s, b)
	assert.NotEqual(t, aOwner, ownerAnnotation(t, configMaps, ns, "z"), "B's object carries B's owner, whatever its manifest says")
}

// A target whose TrackingValue changes between deliveries relabels its
// objects and still prunes them; the other target of its old value never
// sees them as its own.
func TestAttackTrackingValueChangesBetweenDeliveries(t *testing.T) {
	ns := env.Namespace(t)
	value := atomic.Value{}
	value.Store("one")
	s := newSink(t, apply.Config{InventoryNamespace: ns, TrackingLabel: attackLabel,
		TrackingValue: func(t watcher.Target) string {
			if t.ID == "a" {
				return value.Load().(string)
			}
			return "one"
		}})
	rs := payload.Render{Namespace: ns}
	a := change("a", "c1", rs, fstest.MapFS{"x.yaml": file(configMap("x", "a"))})
	applyOK(t, s, a)
	value.Store("two")
	a.To = named("c2")
	applyOK(t, s, a)
	assert.Equal(t, "two", get(t, configMaps, ns, "x").GetLabels()[attackLabel])

	b := change("b", "c1", rs, fstest.MapFS{"x.yaml": file(configMap("x", "b"))})
	_, err := s.Apply(ctxT(t), b)
	assert.True(t, errors.Is(err, apply.ErrConflict), "B, of the old value, does not take A's object: %v", err)

	a.To, a.FS = named("c3"), fstest.MapFS{}
	s2 := newSink(t, apply.Config{InventoryNamespace: ns, TrackingLabel: attackLabel, TrackingValue: byName, EmptyRenderConfirm: -1})
	applyOK(t, s2, a)
	assert.Nil(t, get(t, configMaps, ns, "x"), "pruned under yet another value")
}
