package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/internal/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/metrics"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, gittest.LeakOptions...) }

func TestMetricsOfARealWatcher(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("f", "1"))

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	obs := watchertest.NewObserver()
	w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithInterval(time.Hour),
		watcher.WithRetryBackoff(time.Millisecond, 10*time.Millisecond), watcher.WithObserver(m, obs))
	require.NoError(t, m.CollectStats(w))
	sink := watchertest.NewSink("rec")
	fails := 1
	sink.SetHook(func(context.Context, watcher.Change) error {
		if fails > 0 {
			fails--
			return errors.New("first try fails")
		}
		return nil
	})
	require.NoError(t, w.Route(watchertest.NewSource(
		watcher.Target{ID: "ok", URL: repo.URL()},
		watcher.Target{ID: "missing", URL: repo.URL(), Path: "nope"},
	), sink))
	watchertest.Run(t, w.Run)
	obs.WaitFor(t, "the delivery", watchertest.Is(watcher.EventDelivered, "ok"))
	obs.WaitFor(t, "the poll's end", watchertest.Is(watcher.EventPolled, ""))

	remote := repo.URL()
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Polls().WithLabelValues(remote, "success")))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Deliveries().WithLabelValues("rec", "error")))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Deliveries().WithLabelValues("rec", "success")))
	assert.GreaterOrEqual(t, testutil.ToFloat64(m.TargetFailures().WithLabelValues(remote)), 1.0)

	expected := `
# HELP modwatch_remotes Repositories polled.
# TYPE modwatch_remotes gauge
modwatch_remotes 1
# HELP modwatch_targets Valid targets of all routes.
# TYPE modwatch_targets gauge
modwatch_targets 2
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected), "modwatch_remotes", "modwatch_targets"))
	n, err := testutil.GatherAndCount(reg, "modwatch_delivery_lag_seconds", "modwatch_ref_listing_seconds", "modwatch_fetch_seconds", "modwatch_deliveries_retrying")
	require.NoError(t, err)
	assert.Equal(t, 4, n, "lag, listing and fetch histograms and the retry gauge are exported")

	_, err = metrics.New(reg)
	require.Error(t, err, "registering twice on one registry is an error, not a panic")
}
