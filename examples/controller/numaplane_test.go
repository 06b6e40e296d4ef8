package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// writeConfig replaces the configuration file at path as a mounted
// ConfigMap changes: whole, by a rename.
func writeConfig(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

// statusOf waits for the GitSync's status to satisfy ok and returns its
// message.
func statusOf(t *testing.T, ns, name, what string, ok func(phase, msg string) bool) string {
	t.Helper()
	got := env.WaitFor(t, gitsync.GVR, ns, name, what, func(u *unstructured.Unstructured) bool {
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		msg, _, _ := unstructured.NestedString(u.Object, "status", "message")
		return ok(phase, msg)
	})
	msg, _, _ := unstructured.NestedString(got.Object, "status", "message")
	return msg
}

// As Numaplane renders a chart (SkipCrds): the chart's templates are
// applied, the CustomResourceDefinitions of its crds/ folder are not.
func TestAChartsCRDsAreSkipped(t *testing.T) {
	ns := env.Namespace(t)
	repo := gittest.NewServer(t).NewRepo(t, "platform/charts")
	group := "skipped-" + ns + ".example.com"
	c1 := repo.Commit(t, "init",
		gittest.File("chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n"),
		gittest.File("chart/templates/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: chart-web\n"),
		gittest.File("chart/crds/widgets.yaml", fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.%[1]s
spec:
  group: %[1]s
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, group)))
	obs := watchertest.NewObserver()
	startController(t, configFile(t, "clusterName: staging-1\nsyncTimeIntervalMs: 3600000\n"), ns, t.TempDir(), obs, nil)
	createGitSync(t, ns, "chart", map[string]any{"repoUrl": repo.URL(), "path": "chart", "helm": map[string]any{}})
	obs.WaitFor(t, "the chart applied", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Target.ID == gitsync.TargetID(ns, "chart") && e.Commit.String() == c1
	})
	_, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "chart-web", metav1.GetOptions{})
	require.NoError(t, err, "the chart's template applied")
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	_, err = env.Dynamic.Resource(crds).Get(context.Background(), "widgets."+group, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the chart's CRD is skipped: %v", err)
}

// Credentials go to a plain-http git server (a dev cluster's) only where
// their repoCredentials entry opts in by name: until then the GitSync
// fails, its status naming the key; once the configuration opts in, it is
// applied.
func TestCredentialsOverPlainHTTPWaitForTheirOptIn(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewServer(t) // http://127.0.0.1:…
	srv.SetBasicAuth("dev", "dev-password")
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n"))
	_, err := env.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: ns}, Data: map[string][]byte{"password": []byte("dev-password")}}, metav1.CreateOptions{})
	require.NoError(t, err)
	config := filepath.Join(t.TempDir(), "config.yaml")
	credential := func(optIn bool) string {
		return fmt.Sprintf(`clusterName: staging-1
syncTimeIntervalMs: 3600000
repoCredentials:
  - url: %s/platform
    httpCredential:
      username: dev
      allowInsecureHTTP: %t
      password: {fromKubernetesSecret: {name: git, key: password, namespace: %s}}
`, srv.URL(), optIn, ns)
	}
	writeConfig(t, config, credential(false))
	obs := watchertest.NewObserver()
	startController(t, config, ns, t.TempDir(), obs, nil)
	createGitSync(t, ns, "web", map[string]any{"repoUrl": repo.URL(), "path": "web"})
	msg := statusOf(t, ns, "web", "refused over plain http", func(phase, _ string) bool { return phase == gitsync.PhaseFailed })
	assert.Contains(t, msg, "httpCredential.allowInsecureHTTP", "the refusal names the key that allows it")
	assert.NotContains(t, msg, "dev-password")
	_, err = env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "web", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "nothing applied")

	writeConfig(t, config, credential(true))
	obs.WaitFor(t, "applied once opted in", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Target.ID == gitsync.TargetID(ns, "web") && e.Commit.String() == c1
	})
}

// Only ConfigMaps included: a GitSync with a ConfigMap and a Service has
// its ConfigMap applied, labelled with the GitSync's name, its status
// saying the Service was left alone; the Service is not created.
func TestOnlyTheIncludedKindsAreManaged(t *testing.T) {
	ns := env.Namespace(t)
	repo := gittest.NewServer(t).NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init",
		gittest.File("web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n"),
		gittest.File("web/svc.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports: [{port: 80}]\n"))
	obs := watchertest.NewObserver()
	startController(t, configFile(t, "clusterName: staging-1\nsyncTimeIntervalMs: 3600000\nincludedResources: \"group=,kind=ConfigMap\"\n"),
		ns, t.TempDir(), obs, nil)
	createGitSync(t, ns, "web", map[string]any{"repoUrl": repo.URL(), "path": "web"})
	obs.WaitFor(t, "applied", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Target.ID == gitsync.TargetID(ns, "web") && e.Commit.String() == c1
	})
	msg := statusOf(t, ns, "web", "Running", func(phase, _ string) bool { return phase == gitsync.PhaseRunning })
	assert.Contains(t, msg, "1 outside the included kinds, left alone: Service/"+ns+"/web")
	cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "web", cm.Labels[gitsync.TrackingLabel])
	_, err = env.Kube.CoreV1().Services(ns).Get(context.Background(), "web", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the Service is not created: %v", err)
}

// A reconciler beside the controller (Numaplane's own, as its field
// manager) writes Configured=True/Successful into the GitSync's status:
// it survives every delivery, a failed one, a resync and a restart; the
// controller still writes what it owns (commitStatus), never forcing.
func TestAReconcilersConditionSurvivesEveryDelivery(t *testing.T) {
	ns := env.Namespace(t)
	repo := gittest.NewServer(t).NewRepo(t, "platform/apps")
	cm := func(v string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  v: \"" + v + "\"\n"
	}
	c1 := repo.Commit(t, "init", gittest.File("web/cm.yaml", cm("1")))
	config := configFile(t, "clusterName: staging-1\nsyncTimeIntervalMs: 3600000\n")
	cache := t.TempDir()
	obs := watchertest.NewObserver()
	made := make(chan *watcher.Watcher, 1)
	stop := startController(t, config, ns, cache, obs, func(w *watcher.Watcher) { made <- w })
	w := <-made
	createGitSync(t, ns, "web", map[string]any{"repoUrl": repo.URL(), "path": "web"})
	id := gitsync.TargetID(ns, "web")
	obs.WaitFor(t, "applied", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Target.ID == id && e.Commit.String() == c1
	})
	statusOf(t, ns, "web", "Running", func(phase, _ string) bool { return phase == gitsync.PhaseRunning })

	// The reconciler's condition, by its own status update.
	gs, err := env.Dynamic.Resource(gitsync.GVR).Namespace(ns).Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	configured := map[string]any{"type": "Configured", "status": "True", "reason": "Successful", "message": "reconciled",
		"lastTransitionTime": "2026-12-05T00:00:00Z", "observedGeneration": gs.GetGeneration()}
	require.NoError(t, unstructured.SetNestedSlice(gs.Object, []any{configured}, "status", "conditions"))
	_, err = env.Dynamic.Resource(gitsync.GVR).Namespace(ns).UpdateStatus(context.Background(), gs, metav1.UpdateOptions{FieldManager: "numaplane-reconciler"})
	require.NoError(t, err)
	reconciled := func(t *testing.T, what string, ok func(hash string) bool) {
		t.Helper()
		env.WaitFor(t, gitsync.GVR, ns, "web", what, func(u *unstructured.Unstructured) bool {
			hash, _, _ := unstructured.NestedString(u.Object, "status", "commitStatus", "hash")
			return ok(hash)
		})
		u, err := env.Dynamic.Resource(gitsync.GVR).Namespace(ns).Get(context.Background(), "web", metav1.GetOptions{})
		require.NoError(t, err)
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		require.Len(t, conds, 1, "%s: the reconciler's list, as it wrote it: %v", what, conds)
		assert.Equal(t, "Successful", conds[0].(map[string]any)["reason"], what)
	}

	c2 := repo.Commit(t, "two", gittest.File("web/cm.yaml", cm("2")))
	require.True(t, w.Trigger(repo.URL()))
	reconciled(t, "a delivery", func(hash string) bool { return hash == c2 })
	c3 := repo.Commit(t, "broken", gittest.File("web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata: [not, a, map]\n"))
	require.True(t, w.Trigger(repo.URL()))
	obs.WaitFor(t, "c3 failed", func(e watcher.Event) bool { return e.Type == watcher.EventDeliveryFailed && e.Commit.String() == c3 })
	reconciled(t, "a failed delivery", func(hash string) bool { return hash == c3 })
	stop()

	c4 := repo.Commit(t, "fixed", gittest.File("web/cm.yaml", cm("4")))
	startController(t, config, ns, cache, watchertest.NewObserver(), nil)
	reconciled(t, "a restart's delivery", func(hash string) bool { return hash == c4 })
}
