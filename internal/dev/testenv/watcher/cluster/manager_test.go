package cluster_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/cluster"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

func probe(addr, path string) int {
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The watcher in a Manager: it runs with it, on every replica or on the
// leader only, and the Manager's probes answer for it.
func TestAddToManager(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	commit := repo.Commit(t, "one", gittest.File("a.yaml", "a"))
	addr, err := testenv.FreeAddr()
	require.NoError(t, err)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Logger: logr.Discard(), Metrics: server.Options{BindAddress: "0"}, HealthProbeBindAddress: addr})
	require.NoError(t, err)
	w := watcher.New(watcher.WithCacheDir(t.TempDir()))
	sink := watchertest.NewSink("rec")
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "a", URL: repo.URL()}), sink))
	r, err := cluster.AddToManager(mgr, w, cluster.Options{})
	require.NoError(t, err)
	assert.False(t, r.NeedLeaderElection())
	assert.True(t, cluster.NewRunnable(w, cluster.Options{LeaderElection: true}).NeedLeaderElection())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	sink.WaitCommit(t, "a", named(commit))
	require.Eventually(t, func() bool { return probe(addr, "/readyz") == http.StatusOK }, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, http.StatusOK, probe(addr, "/healthz"))
}

// A watcher whose source failed makes the Manager's liveness fail, and a
// watcher that has not synced its sources is not ready.
func TestRunnableChecks(t *testing.T) {
	failing := watcher.New(watcher.WithCacheDir(t.TempDir()))
	require.NoError(t, failing.Route(watcher.SourceFunc(func(context.Context, func([]watcher.Target)) error {
		return errors.New("the source broke")
	}), watchertest.NewSink("rec")))
	r := cluster.NewRunnable(failing, cluster.Options{})
	require.NoError(t, r.Healthz(nil))
	err := r.Start(context.Background())
	require.Error(t, err)
	assert.ErrorContains(t, r.Healthz(nil), "the source broke")

	silent := watcher.New(watcher.WithCacheDir(t.TempDir()))
	require.NoError(t, silent.Route(watcher.SourceFunc(func(ctx context.Context, _ func([]watcher.Target)) error {
		<-ctx.Done()
		return nil
	}), watchertest.NewSink("rec")))
	r = cluster.NewRunnable(silent, cluster.Options{LeaderElection: true})
	require.NoError(t, r.Readyz(nil), "a replica waiting for the leadership is ready")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	require.Eventually(t, func() bool { return r.Readyz(nil) != nil }, 5*time.Second, 10*time.Millisecond, "running, not synced")
	cancel()
	require.NoError(t, <-done)

}
