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

	"github.com/modwatch/modwatch/internal/dev/gittest"
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
		watcher.WithRetryBackoff(watcher.Backoff{Min: time.Millisecond, Max: 10 * time.Millisecond}), watcher.WithObserver(m, obs))
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
	assert.Equal(t, 1.0, value(t, reg, "modwatch_polls_total", prometheus.Labels{"remote": remote, "result": "success"}))
	assert.Equal(t, 1.0, value(t, reg, "modwatch_deliveries_total", prometheus.Labels{"sink": "rec", "result": "error"}))
	assert.Equal(t, 1.0, value(t, reg, "modwatch_deliveries_total", prometheus.Labels{"sink": "rec", "result": "success"}))
	assert.GreaterOrEqual(t, value(t, reg, "modwatch_target_failures_total", prometheus.Labels{"remote": remote}), 1.0)

	expected := `
# HELP modwatch_remotes Repositories polled.
# TYPE modwatch_remotes gauge
modwatch_remotes 1
# HELP modwatch_targets Valid targets of all routes.
# TYPE modwatch_targets gauge
modwatch_targets 2
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected), "modwatch_remotes", "modwatch_targets"))
	n, err := testutil.GatherAndCount(reg, "modwatch_delivery_lag_seconds", "modwatch_ref_listing_seconds", "modwatch_fetch_seconds", "modwatch_deliveries_retrying",
		"modwatch_removals_held", "modwatch_sources_without_set")
	require.NoError(t, err)
	assert.Equal(t, 6, n, "lag, listing and fetch histograms, the retry, removals-held and no-set gauges are exported")

	// A metric of the same name and another kind is an error, not a panic.
	clash := prometheus.NewRegistry()
	require.NoError(t, clash.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "modwatch_polls_total", Help: "not ours"})))
	_, err = metrics.New(clash)
	require.Error(t, err)
}

// value is the counter of family name with these labels, read from the
// registry as a scraper would.
func value(t *testing.T, reg *prometheus.Registry, name string, labels prometheus.Labels) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s%v in the registry", name, labels)
	return 0
}

// Two watchers of one process on one registry share the counters; the
// gauges are the second one's.
func TestTwoWatchersShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := metrics.New(reg)
	require.NoError(t, err)
	b, err := metrics.New(reg)
	require.NoError(t, err, "the second shares the first's collectors")
	wa, wb := watcher.New(), watcher.New()
	require.NoError(t, a.CollectStats(wa))
	require.NoError(t, b.CollectStats(wb))
	a.Observe(watcher.Event{Type: watcher.EventPolled, Remote: "r"})
	b.Observe(watcher.Event{Type: watcher.EventPolled, Remote: "r"})
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "modwatch_polls_total" {
			require.Len(t, f.GetMetric(), 1)
			require.Equal(t, 2.0, f.GetMetric()[0].GetCounter().GetValue())
			return
		}
	}
	t.Fatal("no modwatch_polls_total")
}

// A host's requests are counted by kind and answer, a rate limit once an
// episode, and the listings' and fetches' waits for their turn.
func TestHostMetrics(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("f", "1"))
	missing := srv.URL() + "/g/none.git"
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	obs := watchertest.NewObserver()
	w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithInterval(time.Hour),
		watcher.WithRetryBackoff(watcher.Backoff{Min: time.Hour, Max: time.Hour}), watcher.WithObserver(m, obs),
		watcher.WithHostBudget("", watcher.HostBudget{InFlight: 1}))
	sink := watchertest.NewSink("rec")
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "ok", URL: repo.URL()}, watcher.Target{ID: "none", URL: missing}), sink))
	watchertest.Run(t, w.Run)
	sink.WaitDelivered(t, 1)
	obs.WaitFor(t, "the missing repository's failure", watchertest.Is(watcher.EventTargetFailed, "none"))

	host := strings.TrimPrefix(srv.URL(), "http://")
	assert.Equal(t, 1.0, value(t, reg, "modwatch_host_requests_total", prometheus.Labels{"host": host, "kind": "list", "code": "200"}))
	assert.Equal(t, 1.0, value(t, reg, "modwatch_host_requests_total", prometheus.Labels{"host": host, "kind": "list", "code": "404"}))
	assert.Equal(t, 1.0, value(t, reg, "modwatch_host_requests_total", prometheus.Labels{"host": host, "kind": "fetch", "code": "200"}))
	n, err := testutil.GatherAndCount(reg, "modwatch_host_wait_seconds_total")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "one in flight: one of the two listings waited for the other")

	srv.Limit(gittest.Limit{Kind: gittest.TooManyRequests, Until: time.Now().Add(time.Minute)})
	repo.Commit(t, "2", gittest.File("f", "2"))
	require.True(t, w.Trigger(repo.URL()))
	obs.WaitFor(t, "the rate limit", watchertest.Is(watcher.EventRateLimited, ""))
	assert.Equal(t, 1.0, value(t, reg, "modwatch_host_requests_total", prometheus.Labels{"host": host, "kind": "list", "code": "429"}))
	assert.Equal(t, 1.0, value(t, reg, "modwatch_host_rate_limits_total", prometheus.Labels{"host": host}))
}
