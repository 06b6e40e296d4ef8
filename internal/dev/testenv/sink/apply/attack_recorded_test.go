package apply_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher/payload"
)

// A's inventory records x; x is deleted (by a user, or while A's kind
// was left alone) and target B, which renders it too, creates it: x is
// B's. A's next delivery must not take it over (then prune it): the guard
// refuses it, as for any object another target holds.
func TestAttackRecordedObjectRecreatedByAnotherTargetIsNotTakenOver(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{InventoryNamespace: ns, TrackingLabel: attackLabel, TrackingValue: byName})
	rs := payload.Render{Namespace: ns}
	a := change("gitsync/team-a/web", "c1", rs, fstest.MapFS{"x.yaml": file(configMap("x", "a"))})
	b := change("gitsync/team-b/web", "c1", rs, fstest.MapFS{"x.yaml": file(configMap("x", "b"))})

	applyOK(t, s, a)
	require.NoError(t, env.Kube.CoreV1().ConfigMaps(ns).Delete(context.Background(), "x", metav1.DeleteOptions{}))
	applyOK(t, s, b)
	bOwner := ownerAnnotation(t, configMaps, ns, "x")

	_, err := s.Apply(ctxT(t), resync(a))
	assert.ErrorIs(t, err, apply.ErrConflict, "x is B's now: A's delivery is refused")
	assert.Equal(t, "b", cmValue(t, ns, "x"), "B's object is not overwritten by A")
	assert.Equal(t, bOwner, ownerAnnotation(t, configMaps, ns, "x"), "B's object is not relabeled as A's")

	a.To, a.FS = named("c2"), fstest.MapFS{"y.yaml": file(configMap("other", "a"))}
	_, _ = s.Apply(ctxT(t), a)
	require.NotNil(t, get(t, configMaps, ns, "x"), "A's prune does not delete B's object")
}
