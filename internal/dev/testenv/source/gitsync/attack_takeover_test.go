package gitsync_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/source/gitsync"
)

// Attacks on Config.TakeOver: the fields of the managers it names become
// the source's, and no other manager's field ever does.

const oldSelf = "attack-old-controller" // the program's name before the port

func takeOver(names ...string) func(*gitsync.Config) {
	return func(c *gitsync.Config) { c.TakeOver = names }
}

// ownedBy returns the status fields manager owns, any operation, as
// managedFields JSON under f:status (nil: none).
func ownedBy(h *harness, name, manager string) map[string]any {
	h.t.Helper()
	u, err := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(h.t, err)
	out := map[string]any{}
	for _, f := range u.GetManagedFields() {
		if f.Manager != manager || f.FieldsV1 == nil {
			continue
		}
		var owned map[string]any
		require.NoError(h.t, json.Unmarshal(f.FieldsV1.GetRawBytes(), &owned))
		st, _, _ := unstructured.NestedMap(owned, "f:status")
		for k, v := range st {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// startStopped returns a harness whose source is stopped, with the GitSync
// web created, so that the old self's status is there before the source
// starts.
func startStopped(t *testing.T, url string, cfg ...func(*gitsync.Config)) *harness {
	t.Helper()
	h := newHarness(t, "staging-1", apply.Config{}, nil, cfg...)
	h.stop()
	h.create("web", spec(url, "apps/web", h.ns))
	return h
}

// The old self last recorded a failure (commitStatus.error) by an update,
// as Numaplane's controller does. Taken over, the record is the source's:
// the hash it synced, synced, and no error of the old self's beside them.
func TestAttackTakeOverTheOldSelfsErrorGoesWithItsRecord(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("apps/web/a.yaml", cm("a", "1")))
	h := startStopped(t, repo.URL(), takeOver(oldSelf))
	updateStatusAs(h, oldSelf, "web", map[string]any{
		"phase": "Failed", "message": "authentication required",
		"commitStatus": map[string]any{"hash": "0000", "synced": false, "syncTime": "2026-01-01T00:00:00Z", "error": "authentication required"},
	})
	h.start()
	st := h.waitStatus("web", "synced at c1", syncedAt(c1))
	assert.Empty(t, st.CommitStatus.Error, "the old self's error beside the source's synced hash")
	assert.Empty(t, fieldsOf(ownedBy(h, "web", oldSelf)), "the old self's status fields are the source's")
}

// fieldsOf returns the paths of the fields (not the maps they are in: a
// map is shared, not conflicting) that owned, managedFields JSON, names.
func fieldsOf(owned map[string]any) []string {
	var out []string
	for k, v := range owned {
		if k == "." {
			continue
		}
		sub, _ := v.(map[string]any)
		inner := fieldsOf(sub)
		if len(inner) == 0 && !isMap(k) {
			out = append(out, k)
		}
		for _, p := range inner {
			out = append(out, k+"."+p)
		}
	}
	return out
}

// isMap says whether the field k names is a map of Numaplane's schema.
func isMap(k string) bool { return k == "f:commitStatus" || strings.HasPrefix(k, "k:") }

// setPhase sets the phase by an update of the status subresource as
// manager, once (no retry: it runs outside the test's goroutine).
func setPhase(ctx context.Context, ns, name, manager, phase string) error {
	client := env.Dynamic.Resource(gitsync.GVR).Namespace(ns)
	u, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := unstructured.SetNestedField(u.Object, phase, "status", "phase"); err != nil {
		return err
	}
	_, err = client.UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: manager})
	return err
}

// A reconciler (not named) takes the phase right after the source read
// the GitSync and before its forced write: the write, on the version
// read, is refused, not forced over the reconciler's phase; tried again
// on the version after, it takes the old self's fields and leaves the
// reconciler its phase.
func TestAttackTakeOverRacingAWriter(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("apps/web/a.yaml", cm("a", "1")))
	var raced atomic.Bool
	var refused atomic.Int32
	apply := gitsync.ApplyStatus{Client: env.Dynamic, FieldManager: gitsync.DefaultFieldManager}
	race := gitsync.StatusWriterFunc(func(ctx context.Context, ns, name string, s gitsync.Status, f gitsync.ForeignFields) error {
		if _, force := f.TakeOver(s); force && raced.CompareAndSwap(false, true) {
			if err := setPhase(ctx, ns, name, reconciler, gitsync.PhaseFailed); err != nil {
				return err
			}
		}
		err := apply.WriteStatus(ctx, ns, name, s, f)
		if apierrors.IsConflict(err) {
			refused.Add(1)
		}
		return err
	})
	h := startStopped(t, repo.URL(), takeOver(oldSelf), func(c *gitsync.Config) { c.StatusWriter = race })
	updateStatusAs(h, oldSelf, "web", map[string]any{
		"phase": gitsync.PhasePending, "message": "the old self's",
		"commitStatus": map[string]any{"hash": "0000", "synced": false, "syncTime": "2026-01-01T00:00:00Z", "error": "the old self's"},
	})
	h.start()
	st := h.waitStatus("web", "commit c1 synced", func(s gitsync.Status) bool {
		return s.CommitStatus != nil && s.CommitStatus.Hash == c1 && s.CommitStatus.Synced
	})
	assert.True(t, raced.Load())
	assert.Positive(t, refused.Load(), "the forced write on the version read was refused")
	assert.Equal(t, gitsync.PhaseFailed, st.Phase, "the reconciler's phase")
	assert.Contains(t, ownedBy(h, "web", reconciler), "f:phase")
	assert.Empty(t, fieldsOf(ownedBy(h, "web", oldSelf)))
	assert.Empty(t, st.CommitStatus.Error)
}

// A client that names no field manager and whose user agent has no
// program name ("/x") is named "unknown" by the apiserver, not "":
// TakeOver holding "" (an empty -take-over-status) takes none of its
// fields.
func TestAttackTakeOverTheEmptyName(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("apps/web/a.yaml", cm("a", "1")))
	h := startStopped(t, repo.URL(), takeOver(""))
	cfg := rest.CopyConfig(env.Config)
	cfg.UserAgent = "/anonymous"
	anon, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	client := anon.Resource(gitsync.GVR).Namespace(h.ns)
	u, err := client.Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedField(u.Object, gitsync.PhaseFailed, "status", "phase"))
	_, err = client.UpdateStatus(context.Background(), u, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Nil(t, ownedBy(h, "web", ""))
	require.Contains(t, ownedBy(h, "web", "unknown"), "f:phase")
	h.start()
	st := h.waitStatus("web", "commit c1 synced", func(s gitsync.Status) bool {
		return s.CommitStatus != nil && s.CommitStatus.Hash == c1 && s.CommitStatus.Synced
	})
	assert.Equal(t, gitsync.PhaseFailed, st.Phase)
	assert.Contains(t, ownedBy(h, "web", "unknown"), "f:phase")
}
