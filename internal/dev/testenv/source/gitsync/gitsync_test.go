package gitsync_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// harness runs a GitSync source into the apply sink in one namespace.
type harness struct {
	t        *testing.T
	ns       string
	w        *watcher.Watcher
	obs      *watchertest.Observer
	src      *gitsync.Source
	handed   *handed // the sets src handed the watcher
	warnings *warnings

	cluster  string
	applyCfg apply.Config
	creds    *gitsync.Credentials
	srcCfg   []func(*gitsync.Config)
	cacheDir string
	stop     func()
}

// handed is a source that records the last set it handed the watcher,
// once the watcher took it.
type handed struct {
	watcher.Source
	mu   sync.Mutex
	last []watcher.Target
}

func (h *handed) Run(ctx context.Context, update func([]watcher.Target)) error {
	return h.Source.Run(ctx, func(ts []watcher.Target) {
		update(ts)
		h.mu.Lock()
		h.last = ts
		h.mu.Unlock()
	})
}

// target is the target id of the last set handed, if it has it.
func (h *handed) target(id string) (watcher.Target, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.last {
		if t.ID == id {
			return t, true
		}
	}
	return watcher.Target{}, false
}

// warnings records the apiserver's warnings to a client.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.list)
}

// newHarness starts it; with creds, the source watches their Secrets and
// nothing else refreshes the set.
func newHarness(t *testing.T, cluster string, applyCfg apply.Config, creds *gitsync.Credentials, srcCfg ...func(*gitsync.Config)) *harness {
	t.Helper()
	h := &harness{t: t, ns: env.Namespace(t), obs: watchertest.NewObserver(), warnings: &warnings{},
		cluster: cluster, applyCfg: applyCfg, creds: creds, srcCfg: srcCfg, cacheDir: t.TempDir()}
	h.start()
	return h
}

// start runs a new source and watcher, with the harness's configuration
// and cache directory.
func (h *harness) start() {
	t := h.t
	t.Helper()
	src := gitsync.Config{Namespace: h.ns, Settings: gitsync.Settings{ClusterName: h.cluster}, RefreshInterval: -1, Credentials: h.creds}
	for _, f := range h.srcCfg {
		f(&src)
	}
	// The source's own client records the apiserver's warnings (a field
	// the schema does not have is pruned with one).
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = h.warnings
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	h.src = gitsync.New(dyn, src)
	applyCfg := h.applyCfg
	applyCfg.InventoryNamespace = h.ns
	sink, err := apply.New(env.Config, applyCfg)
	require.NoError(t, err)
	wopts := []watcher.Option{
		watcher.WithCacheDir(h.cacheDir), watcher.WithInterval(time.Hour),
		watcher.WithRetryBackoff(watcher.Backoff{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond}),
		watcher.WithObserver(h.obs, h.src.Observer()),
	}
	if h.creds != nil {
		wopts = append(wopts, watcher.WithCredentials(h.creds))
	}
	h.w = watcher.New(wopts...)
	h.handed = &handed{Source: h.src}
	require.NoError(t, h.w.Route(h.handed, sink))
	h.stop = watchertest.Run(t, h.w.Run)
}

// restart stops the source and the watcher and starts new ones (a new
// process: the source remembers nothing it wrote), with the same cache
// directory.
func (h *harness) restart() {
	h.t.Helper()
	h.stop()
	h.start()
}

func (h *harness) create(name string, spec map[string]any) {
	h.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "GitSync",
		"metadata": map[string]any{"name": name, "namespace": h.ns},
		"spec":     spec,
	}}
	_, err := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns).Create(context.Background(), u, metav1.CreateOptions{})
	require.NoError(h.t, err)
}

func (h *harness) setSpec(name string, spec map[string]any) {
	h.t.Helper()
	client := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns)
	u, err := client.Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(h.t, err)
	u.Object["spec"] = spec
	_, err = client.Update(context.Background(), u, metav1.UpdateOptions{})
	require.NoError(h.t, err)
}

// waitStatus watches the GitSync until its status satisfies ok.
func (h *harness) waitStatus(name, what string, ok func(gitsync.Status) bool) gitsync.Status {
	h.t.Helper()
	var st gitsync.Status
	env.WaitFor(h.t, gitsync.GVR, h.ns, name, what, func(u *unstructured.Unstructured) bool {
		require.NotNil(h.t, u, "GitSync %s is gone", name)
		st = h.statusOf(u)
		return ok(st)
	})
	return st
}

func syncedAt(commit string) func(gitsync.Status) bool {
	return func(s gitsync.Status) bool {
		return s.Phase == gitsync.PhaseRunning && s.CommitStatus != nil && s.CommitStatus.Hash == commit && s.CommitStatus.Synced
	}
}

func cm(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: %q\n", name, value)
}

func (h *harness) value(name string) (string, bool) {
	c, err := env.Kube.CoreV1().ConfigMaps(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false
	}
	require.NoError(h.t, err)
	return c.Data["value"], true
}

// uid is the UID of the ConfigMap name in the harness's namespace.
func (h *harness) uid(name string) string {
	h.t.Helper()
	c, err := env.Kube.CoreV1().ConfigMaps(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(h.t, err, name)
	return string(c.UID)
}

func spec(url, path string, ns string) map[string]any {
	return map[string]any{"repoUrl": url, "path": path, "targetRevision": "main",
		"destination": map[string]any{"cluster": "staging-1", "namespace": ns}}
}

func TestGitSyncIsAppliedAndItsStatusWritten(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("apps/web/a.yaml", cm("a", "1")), gittest.File("apps/web/b.yaml", cm("b", "1")), gittest.File("docs/README", "x"))
	h := newHarness(t, "staging-1", apply.Config{}, nil)
	h.create("web", spec(repo.URL(), "apps/web", h.ns))

	st := h.waitStatus("web", "synced at c1", syncedAt(c1))
	assert.Empty(t, st.CommitStatus.Error)
	assert.False(t, st.CommitStatus.SyncTime.IsZero())
	synced := findCondition(st, gitsync.ConditionSynced)
	require.NotNil(t, synced)
	assert.Equal(t, metav1.ConditionTrue, synced.Status)
	assert.Equal(t, int64(1), synced.ObservedGeneration)
	v, _ := h.value("a")
	assert.Equal(t, "1", v)

	c2 := repo.Commit(t, "bump a", gittest.File("apps/web/a.yaml", cm("a", "2")))
	h.w.Trigger(repo.URL())
	h.waitStatus("web", "synced at c2", syncedAt(c2))
	v, _ = h.value("a")
	assert.Equal(t, "2", v)

	delivered := h.obs.Count(watchertest.Is(watcher.EventDelivered, "gitsync/"+h.ns+"/web"))
	c3 := repo.Commit(t, "docs", gittest.File("docs/README", "y"))
	h.w.Trigger(repo.URL())
	h.waitStatus("web", "synced at c3 (the path is unchanged)", syncedAt(c3))
	assert.Equal(t, delivered, h.obs.Count(watchertest.Is(watcher.EventDelivered, "gitsync/"+h.ns+"/web")), "nothing applied")

	c4 := repo.Commit(t, "drop b", gittest.Delete("apps/web/b.yaml"))
	h.w.Trigger(repo.URL())
	h.waitStatus("web", "synced at c4", syncedAt(c4))
	_, exists := h.value("b")
	assert.False(t, exists, "a manifest deleted in git is pruned")
}

func findCondition(s gitsync.Status, typ string) *metav1.Condition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == typ {
			return &s.Conditions[i]
		}
	}
	return nil
}

func TestInvalidAndNotApplicableGitSyncs(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("g/a.yaml", cm("a", "1")), gittest.File("b/b.yaml", cm("b", "1")))
	h := newHarness(t, "staging-1", apply.Config{}, nil)

	bad := spec(repo.URL(), "../outside", h.ns)
	h.create("bad", bad)
	other := spec(repo.URL(), "g", h.ns)
	other["destination"] = map[string]any{"cluster": "prod-1"}
	h.create("other", other)
	h.create("good", spec(repo.URL(), "g", h.ns))

	st := h.waitStatus("bad", "Failed", func(s gitsync.Status) bool { return s.Phase == gitsync.PhaseFailed })
	assert.Contains(t, st.Message, "path")
	c := findCondition(st, gitsync.ConditionConfigured)
	require.NotNil(t, c)
	assert.Equal(t, "InvalidSpec", c.Reason)
	st = h.waitStatus("other", "NotApplicable", func(s gitsync.Status) bool { return s.Phase == gitsync.PhaseNotApplicable })
	assert.Contains(t, st.Message, "prod-1")
	h.waitStatus("good", "the others are synced", syncedAt(c1))

	h.setSpec("bad", spec(repo.URL(), "b", h.ns))
	st = h.waitStatus("bad", "recovered", syncedAt(c1))
	c = findCondition(st, gitsync.ConditionConfigured)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, int64(2), c.ObservedGeneration)
}

func TestTwoGitSyncsOnOneRepositoryShareItsPolls(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/mono")
	c1 := repo.Commit(t, "init", gittest.File("one/a.yaml", cm("one", "1")), gittest.File("two/a.yaml", cm("two", "1")))
	h := newHarness(t, "staging-1", apply.Config{}, nil)
	h.create("one", spec(repo.URL(), "one", h.ns))
	h.create("two", spec(repo.URL(), "two", h.ns))
	h.waitStatus("one", "synced", syncedAt(c1))
	h.waitStatus("two", "synced", syncedAt(c1))

	poll := func() {
		t0 := time.Now()
		require.True(t, h.w.Trigger(repo.URL()))
		h.obs.WaitFor(t, "a poll after the trigger", func(e watcher.Event) bool {
			return e.Type == watcher.EventPolled && !e.Time.Add(-e.Duration).Before(t0)
		})
	}
	poll() // settle
	lists := repo.Counts().Lists.Load()
	for range 3 {
		poll()
	}
	assert.Equal(t, lists+3, repo.Counts().Lists.Load(), "one ref listing per cycle for two GitSyncs")
}

func TestDeletingAGitSync(t *testing.T) {
	for _, cascade := range []bool{false, true} {
		t.Run(fmt.Sprintf("cascade=%v", cascade), func(t *testing.T) {
			srv := gittest.NewServer(t)
			repo := srv.NewRepo(t, "platform/apps")
			c1 := repo.Commit(t, "init", gittest.File("a.yaml", cm("a", "1")))
			h := newHarness(t, "staging-1", apply.Config{CascadeDelete: cascade}, nil)
			h.create("web", spec(repo.URL(), "", h.ns))
			h.waitStatus("web", "synced", syncedAt(c1))

			require.NoError(t, env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns).Delete(context.Background(), "web", metav1.DeleteOptions{}))
			h.obs.WaitFor(t, "the target removed", func(e watcher.Event) bool {
				return e.Type == watcher.EventRemoved && e.Err == nil && e.Target.ID == "gitsync/"+h.ns+"/web"
			})
			_, exists := h.value("a")
			assert.Equal(t, !cascade, exists, "objects are deleted with the GitSync only with cascade deletion")
		})
	}
}

func TestPrivateRepositoryWithCredentialsFromASecret(t *testing.T) {
	srv := gittest.NewTLSServer(t)
	srv.SetBasicAuth("deploy", "first-password")
	repo := srv.NewRepo(t, "private/apps")
	c1 := repo.Commit(t, "init", gittest.File("a.yaml", cm("a", "1")))

	secretNS := env.Namespace(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: secretNS},
		Data: map[string][]byte{"password": []byte("first-password"), "ca.crt": srv.CACert()}}
	_, err := env.Kube.CoreV1().Secrets(secretNS).Create(context.Background(), secret, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg, err := gitsync.ParseControllerConfig(fmt.Appendf(nil, `
clusterName: staging-1
repoCredentials:
  - url: %s/private
    httpCredential:
      username: deploy
      password: {fromKubernetesSecret: {name: git, key: password, namespace: %s}}
    tls:
      caCertificate: {fromKubernetesSecret: {name: git, key: ca.crt, namespace: %s}}
`, srv.URL(), secretNS, secretNS))
	require.NoError(t, err)
	creds, err := gitsync.NewCredentials(env.Kube, cfg)
	require.NoError(t, err)
	h := newHarness(t, "staging-1", apply.Config{}, creds)
	h.create("private", spec(repo.URL(), "", h.ns))
	h.waitStatus("private", "synced over basic auth", syncedAt(c1))

	// Rotate: the server and the Secret both change.
	srv.SetBasicAuth("deploy", "second-password")
	secret.Data["password"] = []byte("second-password")
	_, err = env.Kube.CoreV1().Secrets(secretNS).Update(context.Background(), secret, metav1.UpdateOptions{})
	require.NoError(t, err)
	c2 := repo.Commit(t, "after rotation", gittest.File("a.yaml", cm("a", "2")))
	deadline := time.Now().Add(30 * time.Second)
	for !syncedAt(c2)(h.status("private")) && time.Now().Before(deadline) {
		h.pollOnce(repo.URL())
	}
	h.waitStatus("private", "synced after the rotation", syncedAt(c2))

	// A wrong password in the Secret: Failed, and the message holds no secret.
	secret.Data["password"] = []byte("wrong-password-xyz")
	_, err = env.Kube.CoreV1().Secrets(secretNS).Update(context.Background(), secret, metav1.UpdateOptions{})
	require.NoError(t, err)
	repo.Commit(t, "unreachable", gittest.File("a.yaml", cm("a", "3")))
	var st gitsync.Status
	deadline = time.Now().Add(30 * time.Second)
	for st = h.status("private"); st.Phase != gitsync.PhaseFailed && time.Now().Before(deadline); st = h.status("private") {
		h.pollOnce(repo.URL())
	}
	require.Equal(t, gitsync.PhaseFailed, st.Phase, "%+v", st)
	for _, secretText := range []string{"wrong-password-xyz", "second-password", "first-password"} {
		assert.NotContains(t, st.Message, secretText)
		assert.NotContains(t, st.CommitStatus.Error, secretText)
		for _, c := range st.Conditions {
			assert.NotContains(t, c.Message, secretText)
		}
	}
	assert.True(t, strings.Contains(st.Message, "auth") || strings.Contains(st.Message, "401"), st.Message)
}

// status reads the GitSync's status now.
func (h *harness) status(name string) gitsync.Status {
	h.t.Helper()
	u, err := env.Dynamic.Resource(gitsync.GVR).Namespace(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(h.t, err)
	return h.statusOf(u)
}

func (h *harness) statusOf(u *unstructured.Unstructured) gitsync.Status {
	var st gitsync.Status
	raw, _ := u.Object["status"].(map[string]any)
	require.NoError(h.t, runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st))
	return st
}

// pollOnce triggers a poll of url and waits for one that started after.
func (h *harness) pollOnce(url string) {
	h.t.Helper()
	t0 := time.Now()
	h.w.Trigger(url)
	h.obs.WaitFor(h.t, "a poll", func(e watcher.Event) bool {
		return e.Type == watcher.EventPolled && !e.Time.Add(-e.Duration).Before(t0)
	})
}

// syncedWeb starts a harness whose GitSync "web" follows a repository's
// root, and waits for the source to say it synced the repository's first
// commit, c1.
func syncedWeb(t *testing.T) (h *harness, repo *gittest.Repo, c1 string) {
	t.Helper()
	srv := gittest.NewServer(t)
	repo = srv.NewRepo(t, "platform/apps")
	c1 = repo.Commit(t, "init", gittest.File("a.yaml", cm("a", "1")))
	h = newHarness(t, "staging-1", apply.Config{}, nil)
	h.create("web", spec(repo.URL(), "", h.ns))
	h.waitStatus("web", "synced", syncedAt(c1))
	return h, repo, c1
}
