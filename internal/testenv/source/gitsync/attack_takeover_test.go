package gitsync_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/internal/gittest"
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
		require.NoError(h.t, json.Unmarshal(f.FieldsV1.Raw, &owned))
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
