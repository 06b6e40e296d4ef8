package gitsync_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
)

// Attacks on the status writer: another field manager's status fields.

const reconciler = "attack-reconciler"

// applyStatusAs applies status to the GitSync name as manager, forced.
func (h *harness) applyStatusAs(manager, name string, status map[string]any) {
	h.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "GitSync",
		"metadata": map[string]any{"name": name, "namespace": h.ns},
		"status":   status,
	}}
	_, err := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns).ApplyStatus(context.Background(), name, u,
		metav1.ApplyOptions{FieldManager: manager, Force: true})
	require.NoError(h.t, err)
}

// settle waits for the delivery of commit to the GitSync name, then for
// the source's status write that follows, if any (its writes are
// asynchronous).
func (h *harness) settle(name, commit string) {
	h.t.Helper()
	h.obs.WaitFor(h.t, "delivered "+commit, func(e watcher.Event) bool {
		return (e.Type == watcher.EventDelivered || e.Type == watcher.EventUpToDate) && e.Commit.String() == commit &&
			e.Target != nil && e.Target.ID == gitsync.TargetID(h.ns, name)
	})
	time.Sleep(time.Second)
}

func condition(typ, status, reason, msg string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg,
		"lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": int64(1)}
}

// A reconciler took the whole status (a forced apply of every field):
// the source changes none of it, across a delivery and a restart.
func TestAttackStatusAllOwnedWholeByAReconciler(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("apps/web/a.yaml", cm("a", "1")))
	h := newHarness(t, "staging-1", apply.Config{}, nil)
	h.create("web", spec(repo.URL(), "apps/web", h.ns))
	h.waitStatus("web", "synced at c1", syncedAt(c1))
	mine := map[string]any{
		"phase": "Failed", "message": "the reconciler's",
		"conditions":   []any{condition("Configured", "True", "Successful", "the reconciler's")},
		"commitStatus": map[string]any{"hash": "r", "synced": false, "syncTime": "2026-01-01T00:00:00Z", "error": "the reconciler's"},
	}
	h.applyStatusAs(reconciler, "web", mine)
	want := h.status("web")

	c2 := repo.Commit(t, "bump", gittest.File("apps/web/a.yaml", cm("a", "2")))
	h.w.Trigger(repo.URL())
	h.settle("web", c2)
	assert.Equal(t, want, h.status("web"))
	h.restart()
	c3 := repo.Commit(t, "bump", gittest.File("apps/web/a.yaml", cm("a", "3")))
	h.w.Trigger(repo.URL())
	h.settle("web", c3)
	assert.Equal(t, want, h.status("web"))
}

// A user resets the GitSync's managedFields ([{}]) after a reconciler
// wrote its Configured condition (Numaplane's atomic list); the source
// restarts, its cache showing no managedFields. The apiserver gives what
// was there to "before-first-apply" at the source's first apply, and the
// reconciler's condition stays.
func TestAttackManagedFieldsReset(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("apps/web/a.yaml", cm("a", "1")))
	h := newHarness(t, "staging-1", apply.Config{}, nil)
	h.create("web", spec(repo.URL(), "apps/web", h.ns))
	h.waitStatus("web", "synced at c1", syncedAt(c1))
	h.applyStatusAs(reconciler, "web", map[string]any{
		"conditions": []any{condition("Configured", "True", "Successful", "the reconciler's")}})

	client := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns)
	u, err := client.Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{}})
	_, err = client.Update(context.Background(), u, metav1.UpdateOptions{})
	require.NoError(t, err)
	u, err = client.Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, u.GetManagedFields())

	h.restart()
	c2 := repo.Commit(t, "bump", gittest.File("apps/web/a.yaml", cm("a", "2")))
	h.w.Trigger(repo.URL())
	h.settle("web", c2)
	st := h.status("web")
	c := findCondition(st, gitsync.ConditionConfigured)
	require.NotNil(t, c)
	assert.Equal(t, "Successful", c.Reason)
}
