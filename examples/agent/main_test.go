package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func agentConfig(repoURL, revision, ns string) string {
	return fmt.Sprintf(`clusterName: c1
timeIntervalSec: 1
source:
  keyValueGenerator:
    embedded:
      values:
        clusterName: c1
  gitDefinition:
    repoUrl: %s
    path: clusters/{{clusterName}}
    targetRevision: %s
    destination:
      namespace: %s
`, repoURL, revision, ns)
}

func manifest(value string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: control\ndata:\n  value: " + value + "\n"
}

// mount lays out dir as the kubelet mounts a ConfigMap, and returns the
// kubelet's atomic update.
func mount(t *testing.T, dir, content string) func(string) {
	n := 0
	write := func(content string) string {
		n++
		ts := fmt.Sprintf("..2026_11_30_%02d", n)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, ts), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, ts, "config.yaml"), []byte(content), 0o644))
		return ts
	}
	current := write(content)
	require.NoError(t, os.Symlink(current, filepath.Join(dir, "..data")))
	require.NoError(t, os.Symlink("..data/config.yaml", filepath.Join(dir, "config.yaml")))
	return func(content string) {
		next := write(content)
		require.NoError(t, os.Symlink(next, filepath.Join(dir, "..data_tmp")))
		require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
		require.NoError(t, os.RemoveAll(filepath.Join(dir, current)))
		current = next
	}
}

func TestAgentAppliesTheControlRepoAndFollowsTheConfigMap(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/control")
	mainCommit := repo.Commit(t, "main", gittest.File("clusters/c1/control.yaml", manifest("main-1")), gittest.File("clusters/c2/control.yaml", manifest("other")))
	repo.Checkout(t, "release")
	releaseCommit := repo.Commit(t, "release", gittest.File("clusters/c1/control.yaml", manifest("release-1")))

	mountDir := t.TempDir()
	update := mount(t, mountDir, agentConfig(repo.URL(), "main", ns))
	obs := watchertest.NewObserver()
	watchertest.Run(t, func(ctx context.Context) error {
		return run(ctx, options{
			config: filepath.Join(mountDir, "config.yaml"), kube: env.Config, cacheDir: t.TempDir(),
			inventory: ns, log: testr.New(t), observer: obs,
		})
	})
	value := func() string {
		cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "control", metav1.GetOptions{})
		require.NoError(t, err)
		return cm.Data["value"]
	}
	delivered := func(commit string) {
		t.Helper()
		obs.WaitFor(t, "the delivery of "+commit, func(e watcher.Event) bool {
			return e.Type == watcher.EventDelivered && e.Commit.String() == commit
		})
	}

	delivered(mainCommit)
	assert.Equal(t, "main-1", value(), "the cluster's path of the control repo is applied, placeholders filled")

	update(agentConfig(repo.URL(), "release", ns))
	delivered(releaseCommit)
	assert.Equal(t, "release-1", value(), "the ConfigMap's new revision is applied")

	next := repo.Commit(t, "release 2", gittest.File("clusters/c1/control.yaml", manifest("release-2")))
	delivered(next)
	assert.Equal(t, "release-2", value(), "a new commit on the control repo is applied")
}

// Numaplane's reference form: the placeholders' values come from files in
// a git repository (the cluster's entry of each, the later overriding),
// and the control repository is reached with the gitDefinition's own
// repoCredential (a password from a file), which no other target uses.
func TestAgentOnTheReferenceFormWithARepoCredential(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewTLSServer(t)
	values := srv.NewRepo(t, "platform/values")
	values.Commit(t, "values",
		gittest.File("default-clusters.json", `{"c1": {"clusterName": "c1", "env": "dev"}}`),
		gittest.File("override-clusters.json", `{"c1": {"env": "prod"}}`))
	control := srv.NewRepo(t, "platform/control")
	c1 := control.Commit(t, "main", gittest.File("clusters/c1/prod/control.yaml", manifest("ref-1")))
	srv.SetBasicAuth("agent", "s3cret-pw")

	dir := t.TempDir()
	pw := filepath.Join(dir, "creds.json")
	secrets, err := json.Marshal(map[string]string{"password": "s3cret-pw", "ca.crt": string(srv.CACert())})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(pw, secrets, 0o600))
	cred := fmt.Sprintf(`{httpCredential: {username: agent, password: {fromFile: {jsonFilePath: %[1]s, key: password}}}, tls: {caCertificate: {fromFile: {jsonFilePath: %[1]s, key: ca.crt}}}}`, pw)
	config := fmt.Sprintf(`clusterName: c1
timeIntervalSec: 1
logLevel: 1
source:
  keyValueGenerator:
    reference:
      files:
        - {path: default-clusters.json, repoUrl: %[1]s, targetRevision: main, repoCredential: %[4]s}
        - {path: override-clusters.json, repoUrl: %[1]s, targetRevision: main, repoCredential: %[4]s}
  gitDefinition:
    repoUrl: %[2]s
    path: clusters/{{clusterName}}/{{env}}
    targetRevision: main
    repoCredential: %[4]s
    destination:
      namespace: %[3]s
`, values.URL(), control.URL(), ns, cred)
	mountDir := t.TempDir()
	mount(t, mountDir, config)
	obs := watchertest.NewObserver()
	watchertest.Run(t, func(ctx context.Context) error {
		return run(ctx, options{
			config: filepath.Join(mountDir, "config.yaml"), kube: env.Config, cacheDir: t.TempDir(),
			inventory: ns, log: testr.New(t), observer: obs,
		})
	})
	obs.WaitFor(t, "the delivery of the control repository", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Commit.String() == c1
	})
	cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "control", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "ref-1", cm.Data["value"], "clusters/c1/prod: both files' values, the override's last")
	for _, e := range obs.Events() {
		if e.Err != nil {
			assert.NotContains(t, e.Err.Error(), "s3cret-pw")
		}
	}
}

// The agent's configuration file missing for a moment at start (a kubelet
// remount, a slow volume): nothing it applied is removed or re-created,
// the reason is reported, and when the file is back its target is
// delivered again from where it was.
func TestAConfigurationBlinkAtStartRemovesNothing(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/control")
	first := repo.Commit(t, "main", gittest.File("clusters/c1/control.yaml", manifest("main-1")))
	mountDir := t.TempDir()
	mount(t, mountDir, agentConfig(repo.URL(), "main", ns))
	cacheDir := t.TempDir()
	start := func(obs *watchertest.Observer) func() {
		return watchertest.Run(t, func(ctx context.Context) error {
			return run(ctx, options{
				config: filepath.Join(mountDir, "config.yaml"), kube: env.Config, cacheDir: cacheDir,
				inventory: ns, log: testr.New(t), observer: obs,
			})
		})
	}
	obs := watchertest.NewObserver()
	stop := start(obs)
	obs.WaitFor(t, "delivered", func(e watcher.Event) bool { return e.Type == watcher.EventDelivered && e.Commit.String() == first })
	stop()
	uid := func(name string) string {
		t.Helper()
		cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err, name)
		return string(cm.UID)
	}
	inventories := func() map[string]string {
		t.Helper()
		l, err := env.Kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "apply.modwatch.io/inventory=true"})
		require.NoError(t, err)
		out := map[string]string{}
		for _, cm := range l.Items {
			out[cm.Name] = string(cm.UID)
		}
		return out
	}
	applied, held := uid("control"), inventories()
	require.Len(t, held, 1)

	// The file is gone while the agent starts, and comes back 1.5 s later.
	link := filepath.Join(mountDir, "config.yaml")
	require.NoError(t, os.Rename(link, link+".away"))
	obs = watchertest.NewObserver()
	start(obs)
	e := obs.WaitFor(t, "the missing file reported", func(e watcher.Event) bool { return e.Type == watcher.EventNoSet })
	assert.ErrorContains(t, e.Err, "config.yaml is missing")
	time.Sleep(1500 * time.Millisecond)
	assert.Equal(t, held, inventories(), "no inventory removed")
	assert.Equal(t, applied, uid("control"), "nothing deleted")
	require.NoError(t, os.Rename(link+".away", link))

	second := repo.Commit(t, "main 2", gittest.File("clusters/c1/control.yaml", manifest("main-2")))
	obs.WaitFor(t, "delivered from where it was", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Commit.String() == second && e.Change.From.String() == first
	})
	for _, e := range obs.Events() {
		assert.NotEqual(t, watcher.EventRemoved, e.Type, "nothing removed: %s", e)
	}
	assert.Equal(t, held, inventories())
	assert.Equal(t, applied, uid("control"))
}
