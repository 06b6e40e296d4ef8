package gitsync_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// On Numaplane's own CRD (commitStatus requires hash, syncTime and synced;
// there is no status.observedGeneration), a GitSync whose path does not
// exist and one whose manifest the apiserver refuses both show Failed with
// the reason, and no write of the source is pruned with a warning.
func TestFailuresShowOnTheRealCRD(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("good/a.yaml", cm("a", "1")),
		gittest.File("refused/bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\ndata: [not, a, map]\n"))
	h := newHarness(t, "staging-1", apply.Config{}, nil)
	h.create("missing", spec(repo.URL(), "no/such/path", h.ns))
	h.create("refused", spec(repo.URL(), "refused", h.ns))
	h.create("good", spec(repo.URL(), "good", h.ns))

	for name, want := range map[string]string{"missing": "no/such/path", "refused": "bad"} {
		st := h.waitStatus(name, "Failed", func(s gitsync.Status) bool { return s.Phase == gitsync.PhaseFailed })
		assert.Contains(t, st.Message, want, name)
		require.NotNil(t, st.CommitStatus, name)
		assert.Equal(t, c1, st.CommitStatus.Hash, "%s: the commit that failed", name)
		assert.False(t, st.CommitStatus.Synced, name)
		assert.False(t, st.CommitStatus.SyncTime.IsZero(), name)
		assert.Contains(t, st.CommitStatus.Error, want, name)
		c := findCondition(st, gitsync.ConditionSynced)
		require.NotNil(t, c, name)
		assert.Equal(t, metav1.ConditionFalse, c.Status, name)
	}
	h.waitStatus("good", "synced", syncedAt(c1))
	assert.Empty(t, h.warnings.all(), "the source writes only what the schema has")
}

// A program whose reconciler writes phase, message and conditions (as
// Numaplane's does, with its own field manager) has the source write
// commitStatus only: the reconciler's fields survive every write of the
// source, and the source's survive the reconciler's.
func TestTheReconcilersStatusFieldsSurvive(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("a.yaml", cm("a", "1")))
	h := newHarness(t, "staging-1", apply.Config{}, nil, func(c *gitsync.Config) { c.StatusFields = gitsync.StatusCommit })
	h.create("web", spec(repo.URL(), "", h.ns))

	// The reconciler marks it Running, as Numaplane's does, as another
	// field manager.
	reconciled := map[string]any{
		"phase": "Running", "message": "reconciled by numaplane",
		"conditions": []any{map[string]any{"type": "Configured", "status": "True", "reason": "Successful",
			"message": "Successful", "lastTransitionTime": "2026-01-01T00:00:00Z"}},
	}
	reconcile := func() {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "GitSync",
			"metadata": map[string]any{"name": "web", "namespace": h.ns}, "status": reconciled,
		}}
		_, err := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns).ApplyStatus(context.Background(), "web", u,
			metav1.ApplyOptions{FieldManager: "numaplane-controller", Force: true})
		require.NoError(t, err)
	}
	reconcile()
	st := h.waitStatus("web", "synced", func(s gitsync.Status) bool {
		return s.CommitStatus != nil && s.CommitStatus.Hash == c1 && s.CommitStatus.Synced
	})
	assert.Equal(t, "Running", st.Phase)
	assert.Equal(t, "reconciled by numaplane", st.Message)
	require.Len(t, st.Conditions, 1)
	assert.Equal(t, "Successful", st.Conditions[0].Reason)

	reconcile() // again, after the source wrote
	c2 := repo.Commit(t, "2", gittest.File("a.yaml", cm("a", "2")))
	h.pollOnce(repo.URL())
	st = h.waitStatus("web", "synced at c2", func(s gitsync.Status) bool {
		return s.CommitStatus != nil && s.CommitStatus.Hash == c2 && s.CommitStatus.Synced
	})
	assert.Equal(t, "reconciled by numaplane", st.Message, "the reconciler's message is not wiped")
	require.Len(t, st.Conditions, 1)
	assert.Equal(t, "Successful", st.Conditions[0].Reason)

	u, err := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns).Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	owners := map[string]string{}
	for _, f := range u.GetManagedFields() {
		if f.Subresource == "status" {
			owners[f.Manager] = f.FieldsV1.GetRawString()
		}
	}
	require.Contains(t, owners, gitsync.DefaultFieldManager)
	assert.Contains(t, owners[gitsync.DefaultFieldManager], "commitStatus")
	assert.NotContains(t, owners[gitsync.DefaultFieldManager], "conditions")
	assert.NotContains(t, owners[gitsync.DefaultFieldManager], "phase")
}

// The embedding program decides which GitSyncs are watched: one its hook
// refuses (Numaplane refuses a GitSync without a destination namespace)
// never becomes a target, so nothing of it is applied anywhere, and its
// status says why.
func TestAGitSyncTheProgramRefusesAppliesNothing(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("a.yaml", cm("a", "1")))
	needsNamespace := func(_ metav1.Object, gs payload.GitSync) error {
		if gs.Destination.Namespace == "" {
			return errors.New("spec.destination.namespace is required")
		}
		return nil
	}
	h := newHarness(t, "staging-1", apply.Config{}, nil, func(c *gitsync.Config) { c.Accept = needsNamespace })
	noNS := spec(repo.URL(), "", "")
	delete(noNS["destination"].(map[string]any), "namespace")
	h.create("no-namespace", noNS)
	h.create("good", spec(repo.URL(), "", h.ns))

	st := h.waitStatus("no-namespace", "refused", func(s gitsync.Status) bool { return s.Phase == gitsync.PhaseFailed })
	assert.Contains(t, st.Message, "destination.namespace is required")
	c := findCondition(st, gitsync.ConditionConfigured)
	require.NotNil(t, c)
	assert.Equal(t, "Refused", c.Reason)
	h.waitStatus("good", "synced", syncedAt(c1))
	for _, e := range h.obs.Events() {
		if e.Target != nil && e.Target.ID == gitsync.TargetID(h.ns, "no-namespace") {
			assert.Equal(t, watcher.EventInvalidTarget, e.Type, "named, never watched: %s", e)
		}
	}
	_, err := env.Kube.CoreV1().ConfigMaps("default").Get(context.Background(), "a", metav1.GetOptions{})
	assert.Error(t, err, "nothing applied into default")
	assert.Equal(t, "gitsync/"+h.ns+"/good", gitsync.TargetID(h.ns, "good"))
}

// automatedSyncDisabled (Config.Suspend) suspends every GitSync: a new
// commit is not applied and the status says so; enabled again, the latest
// commit is applied.
func TestAutomatedSyncDisabled(t *testing.T) {
	h, repo, c1 := syncedWeb(t)

	h.src.SetSettings(gitsync.Settings{ClusterName: "staging-1", Suspend: true})
	c2 := repo.Commit(t, "2", gittest.File("a.yaml", cm("a", "2")))
	h.pollOnce(repo.URL())
	st := h.waitStatus("web", "suspended", func(s gitsync.Status) bool {
		c := findCondition(s, gitsync.ConditionSynced)
		return c != nil && c.Reason == "Suspended"
	})
	assert.Contains(t, st.Message, "automated sync is disabled")
	assert.Equal(t, c1, st.CommitStatus.Hash, "the last commit applied")
	v, _ := h.value("a")
	assert.Equal(t, "1", v, "c2 not applied")

	h.src.SetSettings(gitsync.Settings{ClusterName: "staging-1"})
	h.waitStatus("web", "synced at c2 once enabled", syncedAt(c2))
	v, _ = h.value("a")
	assert.Equal(t, "2", v)
}
