package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/cluster"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// logs is a logger's output, to look for what an operator would read.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) write(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(&l.buf, prefix, args)
}

func (l *logs) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.buf.String(), s)
}

// The manifests in deploy/ are enough, and no more than enough: the
// controller, run with its ServiceAccount's identity under RBAC, applies a
// GitSync, writes its status and holds its Lease; without the status rule
// it says it is forbidden to.
func TestDeployedWithLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	var config string
	for _, u := range env.ApplyKustomization(t, "deploy") {
		if u.GetKind() == "ConfigMap" {
			config, _, _ = unstructured.NestedString(u.Object, "data", "config.yaml")
		}
	}
	ns := "modwatch-system"
	require.NotEmpty(t, config)
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(configFile, []byte(config), 0o644))
	sa := env.ServiceAccountConfig(ns, "modwatch-controller")
	apps := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  v: \"1\"\n"))
	var out logs
	log := funcr.New(out.write, funcr.Options{Verbosity: 1})
	obs := watchertest.NewObserver()
	watchertest.Run(t, func(ctx context.Context) error {
		return run(ctx, sa, options{config: configFile, inventory: ns, cacheDir: t.TempDir(), shard: true,
			pod: cluster.LeaseShardConfig{Namespace: ns, Identity: "controller-0", Group: "modwatch-controller", ReleaseOnCancel: true},
			mgr: ctrl.Options{Metrics: server.Options{BindAddress: "0"}, Logger: log}, observers: []watcher.Observer{obs}})
	})
	gs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "GitSync",
		"metadata": map[string]any{"name": "web", "namespace": apps},
		"spec": map[string]any{"repoUrl": repo.URL(), "path": "web", "targetRevision": "main",
			"destination": map[string]any{"cluster": "staging-1", "namespace": apps}},
	}}
	_, err := env.Dynamic.Resource(gitsync.GVR).Namespace(apps).Create(ctx, gs, metav1.CreateOptions{})
	require.NoError(t, err)
	id := "gitsync/" + apps + "/web"
	defer func() {
		if t.Failed() {
			t.Log(out.buf.String())
		}
	}()
	obs.WaitFor(t, "the GitSync applied", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Target.ID == id && e.Commit.String() == c1
	})
	_, err = env.Kube.CoreV1().ConfigMaps(apps).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err, "applied")
	require.Eventually(t, func() bool {
		u, err := env.Dynamic.Resource(gitsync.GVR).Namespace(apps).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false
		}
		sha, _, _ := unstructured.NestedString(u.Object, "status", "commitStatus", "hash")
		return sha == c1
	}, 30*time.Second, 100*time.Millisecond, "status written")
	_, err = env.Kube.CoordinationV1().Leases(ns).Get(ctx, "modwatch-controller-controller-0", metav1.GetOptions{})
	require.NoError(t, err, "its membership Lease")
	require.False(t, out.has("forbidden"), out.buf.String())

	// One rule less: the status cannot be written, and the log says why.
	role, err := env.Kube.RbacV1().ClusterRoles().Get(ctx, "modwatch-controller", metav1.GetOptions{})
	require.NoError(t, err)
	role.Rules = slices.DeleteFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "gitsyncs/status") })
	_, err = env.Kube.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
	require.NoError(t, err)
	gs2 := gs.DeepCopy()
	gs2.SetName("web2")
	gs2.SetResourceVersion("")
	_, err = env.Dynamic.Resource(gitsync.GVR).Namespace(apps).Create(ctx, gs2, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return out.has("forbidden") && out.has("gitsyncs/status")
	}, time.Minute, 200*time.Millisecond, "a forbidden status write is reported")
}
