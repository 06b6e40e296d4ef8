package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/internal/dev/upstream"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// createGitSync creates a GitSync for this cluster (staging-1) into ns, at
// main, with spec's fields.
func createGitSync(t *testing.T, ns, name string, spec map[string]any) {
	t.Helper()
	spec["targetRevision"] = "main"
	spec["destination"] = map[string]any{"cluster": "staging-1", "namespace": ns}
	gs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "GitSync",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}
	_, err := env.Dynamic.Resource(gitsync.GVR).Namespace(ns).Create(context.Background(), gs, metav1.CreateOptions{})
	require.NoError(t, err)
}

// webRepo is a repository whose web/ holds one ConfigMap, named web, and
// its commit.
func webRepo(t *testing.T) (*gittest.Repo, string) {
	repo := gittest.NewServer(t).NewRepo(t, "platform/apps")
	return repo, repo.Commit(t, "init", gittest.File("web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  v: \"1\"\n"))
}

// configFile writes a controller configuration and returns its path.
func configFile(t *testing.T, content string) string {
	config := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(config, []byte(content), 0o644))
	return config
}

// startController runs the controller on config for the GitSyncs of ns
// (its inventories there too), with obs, until the test ends; made, when
// set, is told of its watcher. It returns what stops it.
func startController(t *testing.T, config, ns, cacheDir string, obs *watchertest.Observer, made func(*watcher.Watcher)) (stop func()) {
	return watchertest.Run(t, func(ctx context.Context) error {
		return run(ctx, env.Config, options{config: config, namespace: ns, inventory: ns, cacheDir: cacheDir,
			mgr: ctrl.Options{Metrics: server.Options{BindAddress: "0"}, Logger: testr.New(t)}, observers: []watcher.Observer{obs}, made: made})
	})
}

func TestControllerAppliesGitSyncsAndFollowsItsConfig(t *testing.T) {
	ns := env.Namespace(t)
	repo, c1 := webRepo(t)

	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	writeConfig := func(cluster string) {
		data := fmt.Sprintf("clusterName: %s\nsyncTimeIntervalMs: 3600000\ncascadeDeletion: false\nlogLevel: 4\n", cluster)
		tmp := config + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(data), 0o644))
		require.NoError(t, os.Rename(tmp, config))
	}
	writeConfig("staging-1")
	obs := watchertest.NewObserver()
	startController(t, config, ns, t.TempDir(), obs, nil)

	createGitSync(t, ns, "web", map[string]any{"repoUrl": repo.URL(), "path": "web"})
	id := "gitsync/" + ns + "/web"
	obs.WaitFor(t, "the GitSync applied", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Target.ID == id && e.Commit.String() == c1
	})
	_, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)

	// The configuration now names another cluster: the GitSync is no
	// longer for this one. It is still there, so wanted: not watched, and
	// nothing of it removed (as Numaplane skips, never deletes, another
	// cluster's GitSyncs).
	writeConfig("staging-2")
	obs.WaitFor(t, "the target not watched", watchertest.Is(watcher.EventInvalidTarget, id))
	_, err = env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "web", metav1.GetOptions{})
	assert.NoError(t, err)
	for _, e := range obs.Events() {
		assert.NotEqual(t, watcher.EventRemoved, e.Type, "nothing removed: %s", e)
	}
}

// Two installs of the controller, each for its own namespace of GitSyncs,
// both keeping their inventories in one namespace with one field manager:
// neither lists, sweeps or prunes the other's; each still prunes its own.
func TestTwoInstallsNeverTouchEachOthersObjects(t *testing.T) {
	nsA, nsB, inventories := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	repo, c1 := webRepo(t)
	config := configFile(t, "clusterName: staging-1\nsyncTimeIntervalMs: 3600000\ncascadeDeletion: true\n")
	install := func(ns string, obs *watchertest.Observer) (stop func()) {
		cache := filepath.Join(t.TempDir(), ns)
		return watchertest.Run(t, func(ctx context.Context) error {
			return run(ctx, env.Config, options{config: config, namespace: ns, inventory: inventories, cacheDir: cache,
				mgr: ctrl.Options{Metrics: server.Options{BindAddress: "0"}, Logger: testr.New(t)}, observers: []watcher.Observer{obs}})
		})
	}
	webOf := func(ns string) error {
		_, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "web", metav1.GetOptions{})
		return err
	}
	obsA := watchertest.NewObserver()
	install(nsA, obsA)
	createGitSync(t, nsA, "web", map[string]any{"repoUrl": repo.URL(), "path": "web"})
	obsA.WaitFor(t, "A's applied", func(e watcher.Event) bool { return e.Type == watcher.EventDelivered && e.Commit.String() == c1 })

	obsB := watchertest.NewObserver()
	stopB := install(nsB, obsB)
	createGitSync(t, nsB, "web", map[string]any{"repoUrl": repo.URL(), "path": "web"})
	obsB.WaitFor(t, "B's applied", func(e watcher.Event) bool { return e.Type == watcher.EventDelivered && e.Commit.String() == c1 })
	stopB()

	// B's GitSync deleted while B is down: at its start B prunes its own.
	require.NoError(t, env.Dynamic.Resource(gitsync.GVR).Namespace(nsB).Delete(context.Background(), "web", metav1.DeleteOptions{}))
	obsB = watchertest.NewObserver()
	install(nsB, obsB)
	obsB.WaitFor(t, "B's own pruned", watchertest.Is(watcher.EventRemoved, gitsync.TargetID(nsB, "web")))
	assert.True(t, apierrors.IsNotFound(webOf(nsB)), "B's object deleted (cascade)")
	require.NoError(t, webOf(nsA), "A's object untouched")
	for _, e := range obsB.Events() {
		if e.Type == watcher.EventRemoved {
			assert.Equal(t, gitsync.TargetID(nsB, "web"), e.Target.ID, "B removed only its own")
		}
	}
	for _, e := range obsA.Events() {
		assert.NotEqual(t, watcher.EventRemoved, e.Type, "A removed nothing: %s", e)
	}
}

// A GitSync deleted while the controller was stopped is pruned at its next
// start (with cascadeDeletion, its objects too): what the inventories hold
// is compared with the GitSyncs there are.
func TestGitSyncDeletedWhileStoppedIsPrunedAtStart(t *testing.T) {
	ns := env.Namespace(t)
	repo, c1 := webRepo(t)
	config := configFile(t, "clusterName: staging-1\nsyncTimeIntervalMs: 3600000\ncascadeDeletion: true\n")
	cache := t.TempDir()
	start := func(obs *watchertest.Observer) (stop func()) {
		return startController(t, config, ns, cache, obs, nil)
	}
	obs := watchertest.NewObserver()
	stop := start(obs)
	createGitSync(t, ns, "web", map[string]any{"repoUrl": repo.URL(), "path": "web"})
	id := gitsync.TargetID(ns, "web")
	obs.WaitFor(t, "the GitSync applied", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Target.ID == id && e.Commit.String() == c1
	})
	stop()

	require.NoError(t, env.Dynamic.Resource(gitsync.GVR).Namespace(ns).Delete(context.Background(), "web", metav1.DeleteOptions{}))
	obs = watchertest.NewObserver()
	start(obs)
	obs.WaitFor(t, "the GitSync's target removed", watchertest.Is(watcher.EventRemoved, id))
	_, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "web", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "cascade deleted: %v", err)
}

// The base/overlays layout: a GitSync on an overlay whose base is
// "../../base" is rendered against the repository; a commit that touches
// only the base is applied to it, one that touches neither is not.
func TestKustomizeOverlayWithItsBaseElsewhere(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	cm := func(v string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  v: \"" + v + "\"\n"
	}
	c1 := repo.Commit(t, "init",
		gittest.File("base/kustomization.yaml", "resources: [cm.yaml]\n"), gittest.File("base/cm.yaml", cm("1")),
		gittest.File("overlays/prod/kustomization.yaml", "resources: [../../base]\nnamePrefix: prod-\n"),
		gittest.File("docs/README.md", "1"))
	config := configFile(t, "clusterName: staging-1\nsyncTimeIntervalMs: 3600000\n")
	obs := watchertest.NewObserver()
	made := make(chan *watcher.Watcher, 1)
	startController(t, config, ns, t.TempDir(), obs, func(w *watcher.Watcher) { made <- w })
	w := <-made
	poll := func() {
		t.Helper()
		t0 := time.Now()
		require.True(t, w.Trigger(repo.URL()))
		obs.WaitFor(t, "a poll after the trigger", func(e watcher.Event) bool {
			return e.Type == watcher.EventPolled && !e.Time.Add(-e.Duration).Before(t0)
		})
	}
	createGitSync(t, ns, "prod", map[string]any{"repoUrl": repo.URL(), "path": "overlays/prod", "kustomize": map[string]any{}})
	id := gitsync.TargetID(ns, "prod")
	delivered := func(commit string) {
		t.Helper()
		obs.WaitFor(t, "applied at "+commit, func(e watcher.Event) bool {
			return e.Type == watcher.EventDelivered && e.Target.ID == id && e.Commit.String() == commit
		})
	}
	delivered(c1)
	value := func() string {
		c, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "prod-web", metav1.GetOptions{})
		require.NoError(t, err)
		return c.Data["v"]
	}
	assert.Equal(t, "1", value())

	c2 := repo.Commit(t, "the base only", gittest.File("base/cm.yaml", cm("2")))
	poll()
	delivered(c2)
	assert.Equal(t, "2", value(), "a commit touching only the base is applied to the overlay")

	c3 := repo.Commit(t, "neither", gittest.File("docs/README.md", "2"))
	poll()
	obs.WaitFor(t, "c3 seen, nothing to apply", func(e watcher.Event) bool {
		return e.Type == watcher.EventUpToDate && e.Target.ID == id && e.Commit.String() == c3
	})
	assert.Zero(t, obs.Count(func(e watcher.Event) bool { return e.Type == watcher.EventDelivered && e.Commit.String() == c3 }))
}

// A GitSync without a destination namespace is refused, as Numaplane's
// reconciler refuses it: its status says so and nothing of it is applied,
// in "default" or anywhere.
func TestGitSyncWithoutANamespaceIsRefused(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	repo.Commit(t, "init", gittest.File("web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: refused-web\ndata:\n  v: \"1\"\n"))
	config := configFile(t, "clusterName: staging-1\nsyncTimeIntervalMs: 3600000\n")
	obs := watchertest.NewObserver()
	startController(t, config, ns, t.TempDir(), obs, nil)
	gs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "GitSync",
		"metadata": map[string]any{"name": "web", "namespace": ns},
		"spec": map[string]any{"repoUrl": repo.URL(), "path": "web", "targetRevision": "main",
			"destination": map[string]any{"cluster": "staging-1"}},
	}}
	_, err := env.Dynamic.Resource(gitsync.GVR).Namespace(ns).Create(context.Background(), gs, metav1.CreateOptions{})
	require.NoError(t, err)
	got := env.WaitFor(t, gitsync.GVR, ns, "web", "refused", func(u *unstructured.Unstructured) bool {
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		return phase == gitsync.PhaseFailed
	})
	msg, _, _ := unstructured.NestedString(got.Object, "status", "message")
	assert.Contains(t, msg, "spec.destination.namespace")
	for _, e := range obs.Events() {
		if e.Target != nil && e.Target.ID == gitsync.TargetID(ns, "web") {
			assert.Equal(t, watcher.EventInvalidTarget, e.Type, "named, never watched: %s", e)
		}
	}
	_, err = env.Kube.CoreV1().ConfigMaps("default").Get(context.Background(), "refused-web", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "nothing applied into default")
}

// On Numaplane's controller configuration (the fixture in the form of its
// config/manager sample), with Numaplane's semantics: its includedResources
// say what it manages. A GitSync that holds a ConfigMap (included), a
// ServiceAccount and a ClusterRole (not) has its ConfigMap applied and the others
// left alone, its status saying which; every object applied carries the
// tracking label with the GitSync's name, as Numaplane's selectors expect.
func TestOnNumaplanesControllerConfig(t *testing.T) {
	data, err := upstream.FixtureConfig("numaplane/config/manager/controller-config.yaml")
	require.NoError(t, err)
	config := configFile(t, string(data))

	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init",
		gittest.File("web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  v: \"1\"\n"),
		gittest.File("mixed/role.yaml", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: excluded-"+ns+"\nrules: []\n"),
		gittest.File("mixed/sa.yaml", "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: excluded\n"),
		gittest.File("mixed/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: included\n"))
	obs := watchertest.NewObserver()
	startController(t, config, ns, t.TempDir(), obs, nil)
	createGitSync(t, ns, "web", map[string]any{"repoUrl": repo.URL(), "path": "web"})
	createGitSync(t, ns, "mixed", map[string]any{"repoUrl": repo.URL(), "path": "mixed"})
	for _, name := range []string{"web", "mixed"} {
		obs.WaitFor(t, name+" applied", func(e watcher.Event) bool {
			return e.Type == watcher.EventDelivered && e.Target.ID == gitsync.TargetID(ns, name) && e.Commit.String() == c1
		})
	}
	got := env.WaitFor(t, gitsync.GVR, ns, "mixed", "mixed Running", func(u *unstructured.Unstructured) bool {
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		return phase == gitsync.PhaseRunning
	})
	msg, _, _ := unstructured.NestedString(got.Object, "status", "message")
	assert.Contains(t, msg, "left alone")
	assert.Contains(t, msg, "ServiceAccount/"+ns+"/excluded", "the status names what was skipped")
	assert.Contains(t, msg, "ClusterRole.rbac.authorization.k8s.io/excluded-"+ns)

	for name, gitSync := range map[string]string{"web": "web", "included": "mixed"} {
		cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err, "%s applied", name)
		assert.Equal(t, gitSync, cm.Labels[gitsync.TrackingLabel], "the tracking label's value is the GitSync's name")
	}
	selected, err := env.Kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: gitsync.TrackingLabel + "=mixed"})
	require.NoError(t, err)
	require.Len(t, selected.Items, 1, "kubectl get -l %s=mixed finds what the GitSync applied", gitsync.TrackingLabel)
	assert.Equal(t, "included", selected.Items[0].Name)
	_, err = env.Kube.CoreV1().ServiceAccounts(ns).Get(context.Background(), "excluded", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the ServiceAccount is left alone: %v", err)
	_, err = env.Kube.RbacV1().ClusterRoles().Get(context.Background(), "excluded-"+ns, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the ClusterRole is left alone: %v", err)
}
