package gitsync_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
)

// otherManager is the field manager of the embedding program's reconciler.
const otherManager = "numaplane-controller"

// successful is the condition the reconciler writes.
func successful() map[string]any {
	return map[string]any{"type": "Configured", "status": "True", "reason": "Successful", "message": "Successful",
		"lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": int64(1)}
}

// applyStatus has the reconciler write status by a server-side apply,
// forced, as a reconciler that owns those fields does.
func applyStatus(h *harness, name string, status map[string]any) {
	h.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "GitSync",
		"metadata": map[string]any{"name": name, "namespace": h.ns}, "status": status,
	}}
	_, err := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns).ApplyStatus(context.Background(), name, u,
		metav1.ApplyOptions{FieldManager: otherManager, Force: true})
	require.NoError(h.t, err)
}

// updateStatus has the reconciler set the fields of status in the
// GitSync's by an update of the status subresource, as Numaplane's does
// (it takes the fields it changes over, without a conflict).
func updateStatus(h *harness, name string, status map[string]any) {
	h.t.Helper()
	updateStatusAs(h, otherManager, name, status)
}

// updateStatusAs sets the fields of status by an update of the status
// subresource as manager.
func updateStatusAs(h *harness, manager, name string, status map[string]any) {
	h.t.Helper()
	client := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := client.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for k, v := range status {
			require.NoError(h.t, unstructured.SetNestedField(u.Object, v, "status", k))
		}
		_, err = client.UpdateStatus(context.Background(), u, metav1.UpdateOptions{FieldManager: manager})
		return err
	})
	require.NoError(h.t, err)
}

// statusManagers returns the fields each manager owns of the status.
func statusManagers(h *harness, name string) map[string]string {
	h.t.Helper()
	u, err := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(h.t, err)
	owners := map[string]string{}
	for _, f := range u.GetManagedFields() {
		if f.Subresource == "status" {
			owners[f.Manager] = f.FieldsV1.GetRawString()
		}
	}
	return owners
}

// assertSuccessful checks that the reconciler's condition is there as it
// wrote it, and no other.
func assertSuccessful(t *testing.T, st gitsync.Status, when string) {
	t.Helper()
	require.Len(t, st.Conditions, 1, "%s: %+v", when, st.Conditions)
	c := st.Conditions[0]
	assert.Equal(t, metav1.Condition{Type: "Configured", Status: metav1.ConditionTrue, Reason: "Successful", Message: "Successful",
		ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		metav1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message,
			ObservedGeneration: c.ObservedGeneration, LastTransitionTime: metav1.NewTime(c.LastTransitionTime.UTC())}, when)
}

// On Numaplane's CRD, whose conditions are an atomic list, a reconciler
// (another field manager) writes Configured=True/Successful, by apply or by
// an update, after the source wrote its own conditions. In every mode,
// across a delivery, a failed delivery, a suspension and a restart of the
// source (which then remembers nothing it wrote), the reconciler's
// condition stays as it wrote it, and the source's own fields are written
// (commitStatus; with StatusAll phase and message too, which say what the
// Synced condition, not written, would).
func TestAnotherManagersConditionsSurvive(t *testing.T) {
	writes := map[string]func(*harness, string, map[string]any){"apply": applyStatus, "update": updateStatus}
	for _, mode := range []struct {
		name   string
		fields gitsync.StatusFields
	}{{"StatusAll", gitsync.StatusAll}, {"StatusCommit", gitsync.StatusCommit}, {"StatusNone", gitsync.StatusNone}} {
		for _, by := range []string{"apply", "update"} {
			t.Run(mode.name+"/"+by, func(t *testing.T) { anotherManagersConditionsSurvive(t, mode.fields, writes[by]) })
		}
	}
}

func anotherManagersConditionsSurvive(t *testing.T, fields gitsync.StatusFields, write func(*harness, string, map[string]any)) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("a.yaml", cm("a", "1")))
	h := newHarness(t, "staging-1", apply.Config{}, nil, func(c *gitsync.Config) { c.StatusFields = fields })
	h.create("web", spec(repo.URL(), "", h.ns))
	id := gitsync.TargetID(h.ns, "web")
	// step waits for the watcher's event about commit, then for the
	// source's write of it (none with StatusNone).
	step := func(what string, typ watcher.EventType, commit string, written func(gitsync.Status) bool) gitsync.Status {
		t.Helper()
		h.obs.WaitFor(t, what, func(e watcher.Event) bool {
			return e.Type == typ && e.Target != nil && e.Target.ID == id && e.Commit.String() == commit
		})
		return h.waitStatus("web", what, func(s gitsync.Status) bool { return fields == gitsync.StatusNone || written(s) })
	}
	commitIs := func(commit string, synced bool) func(gitsync.Status) bool {
		return func(s gitsync.Status) bool {
			return s.CommitStatus != nil && s.CommitStatus.Hash == commit && s.CommitStatus.Synced == synced
		}
	}
	step("c1 applied", watcher.EventDelivered, c1, commitIs(c1, true))
	write(h, "web", map[string]any{"conditions": []any{successful()}})
	assertSuccessful(t, h.status("web"), "written")

	c2 := repo.Commit(t, "2", gittest.File("a.yaml", cm("a", "2")))
	h.pollOnce(repo.URL())
	st := step("c2 applied", watcher.EventDelivered, c2, commitIs(c2, true))
	assertSuccessful(t, st, "after a delivery")
	if fields == gitsync.StatusAll {
		assert.Equal(t, gitsync.PhaseRunning, st.Phase)
		assert.Contains(t, st.Message, "applied "+c2[:12])
	}

	c3 := repo.Commit(t, "refused", gittest.File("bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\ndata: [not, a, map]\n"))
	h.pollOnce(repo.URL())
	st = step("c3 refused", watcher.EventDeliveryFailed, c3, commitIs(c3, false))
	assertSuccessful(t, st, "after a failed delivery")
	if fields != gitsync.StatusNone {
		assert.Contains(t, st.CommitStatus.Error, "bad")
	}
	if fields == gitsync.StatusAll {
		assert.Equal(t, gitsync.PhaseFailed, st.Phase)
		assert.Contains(t, st.Message, "bad")
	}

	h.src.SetSettings(gitsync.Settings{ClusterName: "staging-1", Suspend: true})
	c4 := repo.Commit(t, "fixed", gittest.Delete("bad.yaml"), gittest.File("a.yaml", cm("a", "4")))
	h.pollOnce(repo.URL())
	st = step("c4 suspended", watcher.EventSuspended, c4, func(s gitsync.Status) bool {
		return fields == gitsync.StatusCommit || s.Message == "automated sync is disabled: "+c4[:12]+" is not applied"
	})
	assertSuccessful(t, st, "after a suspension")

	h.restart() // not suspended
	st = step("c4 applied by a new source", watcher.EventDelivered, c4, commitIs(c4, true))
	assertSuccessful(t, st, "after a restart")
	owners := statusManagers(h, "web")
	assert.Contains(t, owners[otherManager], `"f:conditions"`)
	if fields == gitsync.StatusNone {
		assert.NotContains(t, owners, gitsync.DefaultFieldManager, "the source wrote nothing")
		return
	}
	assert.Contains(t, owners[gitsync.DefaultFieldManager], `"f:commitStatus"`)
	assert.NotContains(t, owners[gitsync.DefaultFieldManager], `"f:conditions"`)
	if fields == gitsync.StatusAll {
		assert.Contains(t, owners[gitsync.DefaultFieldManager], `"f:phase"`)
	}
}

// Another manager's phase, or message, alone (an update of that field):
// the source leaves it as the other set it and writes the rest of the
// status (its conditions, commitStatus), through a delivery and a restart.
func TestAnotherManagersPhaseOrMessageSurvives(t *testing.T) {
	for field, value := range map[string]string{"phase": gitsync.PhasePending, "message": "reconciled by numaplane"} {
		t.Run(field, func(t *testing.T) {
			h, repo, _ := syncedWeb(t)
			updateStatus(h, "web", map[string]any{field: value})
			theirs := func(s gitsync.Status) string { return map[string]string{"phase": s.Phase, "message": s.Message}[field] }

			h.src.Refresh() // the source writes Configured again
			c2 := repo.Commit(t, "2", gittest.File("a.yaml", cm("a", "2")))
			h.pollOnce(repo.URL())
			st := h.waitStatus("web", "c2 synced", func(s gitsync.Status) bool {
				c := findCondition(s, gitsync.ConditionSynced)
				return s.CommitStatus != nil && s.CommitStatus.Hash == c2 && c != nil && c.Status == metav1.ConditionTrue &&
					strings.HasPrefix(c.Message, "applied "+c2[:12])
			})
			assert.Equal(t, value, theirs(st), "the other's %s", field)

			c3 := repo.Commit(t, "3", gittest.File("a.yaml", cm("a", "3")))
			h.restart()
			st = h.waitStatus("web", "c3 synced by a new source", func(s gitsync.Status) bool {
				return s.CommitStatus != nil && s.CommitStatus.Hash == c3 && s.CommitStatus.Synced
			})
			assert.Equal(t, value, theirs(st), "the other's %s", field)
			assert.Equal(t, metav1.ConditionTrue, findCondition(st, gitsync.ConditionConfigured).Status)
			assert.NotContains(t, statusManagers(h, "web")[gitsync.DefaultFieldManager], `"f:`+field+`"`)
		})
	}
}

// call is one call of a StatusWriter: what it was told to leave out, and
// what the apiserver answered.
type call struct {
	foreign string
	err     error
}

// A reconciler that takes the phase over by an update between the source's
// read of the GitSync and its write (the cache does not show it yet): the
// apply, not forced, is refused with a conflict naming .status.phase; the
// source writes the rest without it at once, and the phase stays the
// reconciler's, through the next write too. A custom StatusWriter honours
// it as ApplyStatus does, by passing the foreign fields on.
func TestAFieldTakenDuringAWriteIsLeftToItsManager(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("a.yaml", cm("a", "1")))
	var (
		mu    sync.Mutex
		race  bool
		calls []call
	)
	client := env.Dynamic.Resource(gitsync.GVR)
	applier := gitsync.ApplyStatus{Client: env.Dynamic, FieldManager: gitsync.DefaultFieldManager}
	writer := gitsync.StatusWriterFunc(func(ctx context.Context, ns, name string, s gitsync.Status, foreign gitsync.ForeignFields) error {
		mu.Lock()
		defer mu.Unlock()
		if race {
			race = false
			u, err := client.Namespace(ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				err = unstructured.SetNestedField(u.Object, gitsync.PhasePending, "status", "phase")
			}
			if err == nil {
				_, err = client.Namespace(ns).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: otherManager})
			}
			calls = append(calls, call{foreign: "the reconciler's update", err: err})
		}
		err := applier.WriteStatus(ctx, ns, name, s, foreign)
		calls = append(calls, call{foreign: foreign.String(), err: err})
		return err
	})
	h := newHarness(t, "staging-1", apply.Config{}, nil, func(c *gitsync.Config) { c.StatusWriter = writer })
	h.create("web", spec(repo.URL(), "", h.ns))
	h.waitStatus("web", "synced", syncedAt(c1))
	mu.Lock()
	race, first := true, len(calls)
	mu.Unlock()

	c2 := repo.Commit(t, "2", gittest.File("a.yaml", cm("a", "2")))
	h.pollOnce(repo.URL())
	pending := func(commit string) func(gitsync.Status) bool {
		return func(s gitsync.Status) bool {
			return s.Phase == gitsync.PhasePending && s.CommitStatus != nil && s.CommitStatus.Hash == commit && s.CommitStatus.Synced
		}
	}
	h.waitStatus("web", "c2 synced, the phase the reconciler's", pending(c2))
	mu.Lock()
	raced := slices.Clone(calls[first:])
	mu.Unlock()
	require.GreaterOrEqual(t, len(raced), 3, "%v", raced)
	require.NoError(t, raced[0].err, "the reconciler's update")
	var status apierrors.APIStatus
	require.ErrorAs(t, raced[1].err, &status)
	require.NotNil(t, status.Status().Details)
	causes := status.Status().Details.Causes
	require.Len(t, causes, 1)
	assert.Equal(t, metav1.CauseTypeFieldManagerConflict, causes[0].Type)
	assert.Equal(t, ".status.phase", causes[0].Field, "the apiserver names the field")
	assert.Contains(t, causes[0].Message, otherManager)
	assert.NotContains(t, raced[1].foreign, ".status.phase", "the cache did not show it")
	assert.NoError(t, raced[2].err, "the rest, at once")
	assert.Contains(t, raced[2].foreign, ".status.phase")

	c3 := repo.Commit(t, "3", gittest.File("a.yaml", cm("a", "3")))
	h.pollOnce(repo.URL())
	h.waitStatus("web", "c3 synced, the phase still the reconciler's", pending(c3))
	assert.NotContains(t, statusManagers(h, "web")[gitsync.DefaultFieldManager], `"f:phase"`)
}
