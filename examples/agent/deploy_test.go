package main

import (
	"context"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// deploy/ is enough: run as its ServiceAccount under RBAC, the agent
// applies the control repository and keeps its inventory in its own
// namespace.
func TestDeployedWithLeastPrivilege(t *testing.T) {
	env.ApplyKustomization(t, "deploy")
	sa := env.ServiceAccountConfig("modwatch-agent", "modwatch-agent")
	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/control")
	commit := repo.Commit(t, "main", gittest.File("clusters/c1/control.yaml", manifest("deployed")))
	dir := t.TempDir()
	mount(t, dir, agentConfig(repo.URL(), "main", ns))
	obs := watchertest.NewObserver()
	watchertest.Run(t, func(ctx context.Context) error {
		return run(ctx, options{config: dir + "/config.yaml", kube: sa, cacheDir: t.TempDir(), inventory: "modwatch-agent", log: testr.New(t), observer: obs})
	})
	obs.WaitFor(t, "the control repository applied", func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Commit.String() == commit
	})
	cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "control", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "deployed", cm.Data["value"])
}
