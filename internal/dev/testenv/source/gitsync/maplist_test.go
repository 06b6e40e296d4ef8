package gitsync_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/source/gitsync"
)

const gitSyncCRD = "gitsyncs.numaplane.numaproj.io"

// useMapListCRD serves GitSyncs with the schema of testdata's variant,
// whose conditions are a map list keyed by type, until the test ends (the
// tests of this package do not run in parallel). The variant is checked
// to be the project's fixture but for that.
func useMapListCRD(t *testing.T) {
	t.Helper()
	probeNS := env.Namespace(t) // removed after the project's schema is back
	crds, err := testenv.CRDs()
	require.NoError(t, err)
	var project *apiextensionsv1.CustomResourceDefinition
	for _, c := range crds {
		if c.Name == gitSyncCRD {
			project = c
		}
	}
	require.NotNil(t, project)
	data, err := os.ReadFile("testdata/gitsyncs-maplist.yaml")
	require.NoError(t, err)
	variant := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, yaml.UnmarshalStrict(data, variant))
	want := project.DeepCopy()
	status := want.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	conditions := status.Properties["conditions"]
	listType := "map"
	conditions.XListType, conditions.XListMapKeys = &listType, []string{"type"}
	status.Properties["conditions"] = conditions
	want.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"] = status
	require.Equal(t, want.Spec, variant.Spec, "the variant differs from the project's fixture only in its list type")

	setGitSyncSchema(t, variant.Spec, probeNS, true)
	t.Cleanup(func() { setGitSyncSchema(t, project.Spec, probeNS, false) })
}

// setGitSyncSchema updates the CRD to spec and waits until the apiserver
// applies conditions as a map list (two managers' conditions of two types
// both kept), or as an atomic list (the second replaces the first).
func setGitSyncSchema(t *testing.T, spec apiextensionsv1.CustomResourceDefinitionSpec, probeNS string, mapList bool) {
	t.Helper()
	ctx := context.Background()
	ext, err := apiextensions.NewForConfig(env.Config)
	require.NoError(t, err)
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := crds.Get(ctx, gitSyncCRD, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec = spec
		_, err = crds.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}))
	probe := &harness{t: t, ns: probeNS}
	if _, err := env.Dynamic.Resource(gitsync.GVR).Namespace(probeNS).Get(ctx, "probe", metav1.GetOptions{}); err != nil {
		probe.create("probe", spec0())
	}
	condition := func(typ string) map[string]any {
		return map[string]any{"type": typ, "status": "True", "reason": "Probe", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
	}
	require.Eventually(t, func() bool {
		for _, typ := range []string{"A", "B"} {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "GitSync",
				"metadata": map[string]any{"name": "probe", "namespace": probeNS},
				"status":   map[string]any{"conditions": []any{condition(typ)}},
			}}
			_, err := env.Dynamic.Resource(gitsync.GVR).Namespace(probeNS).ApplyStatus(ctx, "probe", u,
				metav1.ApplyOptions{FieldManager: "probe-" + typ, Force: true})
			require.NoError(t, err)
		}
		st := probe.status("probe")
		return len(st.Conditions) == map[bool]int{true: 2, false: 1}[mapList]
	}, time.Minute, 20*time.Millisecond, "the apiserver serves the new schema")
}

func spec0() map[string]any {
	return map[string]any{"repoUrl": "https://git.example.com/probe.git", "path": "", "targetRevision": "main",
		"destination": map[string]any{"cluster": "nowhere"}}
}

// updateConditions has the reconciler change the conditions by an update
// of the status subresource.
func updateConditions(h *harness, name string, change func([]any) []any) {
	h.t.Helper()
	client := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns)
	require.NoError(h.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := client.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		require.NoError(h.t, unstructured.SetNestedSlice(u.Object, change(conds), "status", "conditions"))
		_, err = client.UpdateStatus(context.Background(), u, metav1.UpdateOptions{FieldManager: otherManager})
		return err
	}))
}

// conditionFields returns the fields manager owns of the condition typ
// (nil: none).
func conditionFields(h *harness, manager, typ string) map[string]any {
	h.t.Helper()
	raw := statusManagers(h, "web")[manager]
	if raw == "" {
		return nil
	}
	var owned map[string]any
	require.NoError(h.t, json.Unmarshal([]byte(raw), &owned))
	c, _, _ := unstructured.NestedMap(owned, "f:status", "f:conditions", `k:{"type":"`+typ+`"}`)
	return c
}

// On a CRD whose conditions are a map list keyed by type, each condition
// has its owner: the reconciler writes Configured (over the source's, by
// a forced apply, or by an update that changes its reason and message) and
// a Ready of its own; the source then writes its Synced condition, and
// never Configured again, across a delivery and a restart.
func TestConditionsOfAMapListAreSharedByType(t *testing.T) {
	ready := map[string]any{"type": "Ready", "status": "True", "reason": "Ready", "message": "ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}
	writes := map[string]func(h *harness){
		"apply": func(h *harness) {
			applyStatus(h, "web", map[string]any{"conditions": []any{successful(), ready}})
		},
		"update": func(h *harness) {
			updateConditions(h, "web", func(conds []any) []any {
				for i, c := range conds {
					if c.(map[string]any)["type"] == "Configured" {
						conds[i] = successful()
					}
				}
				return append(conds, ready)
			})
		},
	}
	for _, by := range []string{"apply", "update"} {
		t.Run(by, func(t *testing.T) {
			useMapListCRD(t)
			h, repo, _ := syncedWeb(t)
			writes[by](h)

			syncedBy := func(commit string) func(gitsync.Status) bool {
				return func(s gitsync.Status) bool {
					c := findCondition(s, gitsync.ConditionSynced)
					return syncedAt(commit)(s) && c != nil && strings.HasPrefix(c.Message, "applied "+commit[:12])
				}
			}
			shared := func(st gitsync.Status, when string) {
				t.Helper()
				require.Len(t, st.Conditions, 3, "%s: %+v", when, st.Conditions)
				configured := *findCondition(st, gitsync.ConditionConfigured)
				assertSuccessful(t, gitsync.Status{Conditions: []metav1.Condition{configured}}, when)
				assert.Equal(t, "Ready", findCondition(st, "Ready").Reason, when)
				assert.Equal(t, metav1.ConditionTrue, findCondition(st, gitsync.ConditionSynced).Status, when)
				assert.NotNil(t, conditionFields(h, gitsync.DefaultFieldManager, "Synced"), when)
				assert.Contains(t, conditionFields(h, otherManager, "Configured"), "f:reason", when)
				mine := conditionFields(h, gitsync.DefaultFieldManager, "Configured")
				if by == "apply" {
					assert.Nil(t, mine, "%s: the reconciler's Configured is all its own", when)
				}
				assert.NotContains(t, mine, "f:reason", when)
				assert.NotContains(t, mine, "f:message", when)
			}
			h.src.Refresh() // the source writes Configured again
			c2 := repo.Commit(t, "2", gittest.File("a.yaml", cm("a", "2")))
			h.pollOnce(repo.URL())
			shared(h.waitStatus("web", "c2 synced", syncedBy(c2)), "after a delivery")

			c3 := repo.Commit(t, "3", gittest.File("a.yaml", cm("a", "3")))
			h.restart()
			shared(h.waitStatus("web", "c3 synced by a new source", syncedBy(c3)), "after a restart")
		})
	}
}
