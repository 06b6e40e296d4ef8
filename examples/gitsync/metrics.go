package main

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
)

// gitSyncMetrics are git-sync's own metrics, beside the library's
// modwatch_* ones, so that dashboards and alerts written for git-sync keep
// working: git_sync_count_total{status} (success: a new commit published;
// noop: a poll that found nothing to fetch; error: a failed sync),
// git_sync_duration_seconds{status} and git_fetch_count_total (one per
// success, as git-sync fetches whenever the commit changed). They count
// the --repo target and its remote (--also targets are the library's own).
type gitSyncMetrics struct {
	count        *prometheus.CounterVec
	duration     *prometheus.SummaryVec
	fetches      prometheus.Counter
	hookRuns     *prometheus.CounterVec
	askpassCalls *prometheus.CounterVec

	link string
	mu   sync.Mutex
	// remote is the main target's remote, as events name it (redacted);
	// fetched says a fetch of it succeeded in the poll under way.
	remote  string
	fetched bool
}

func newGitSyncMetrics(reg prometheus.Registerer, link, repo string) (*gitSyncMetrics, error) {
	m := &gitSyncMetrics{
		count: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "git_sync_count_total",
			Help: "How many git syncs completed, partitioned by state (success, error, noop)",
		}, []string{"status"}),
		duration: prometheus.NewSummaryVec(prometheus.SummaryOpts{
			Name: "git_sync_duration_seconds",
			Help: "Summary of git_sync durations",
		}, []string{"status"}),
		fetches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "git_fetch_count_total",
			Help: "How many git fetches were run",
		}),
		askpassCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "git_sync_askpass_calls",
			Help: "How many git askpass calls completed, partitioned by state (success, error)",
		}, []string{"status"}),
		hookRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "git_sync_hook_run_count_total",
			Help: "How many hook runs completed, partitioned by name and state (success, error)",
		}, []string{"name", "status"}),
		link: link, remote: gitutil.RedactURL(gitutil.StripCredentials(repo)),
	}
	for _, c := range []prometheus.Collector{m.count, m.duration, m.fetches, m.hookRuns, m.askpassCalls} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe is a watcher.Observer.
func (m *gitSyncMetrics) observe(e watcher.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mine := e.Target != nil && e.Target.ID == m.link
	ofRemote := e.Remote != "" && e.Remote == m.remote
	switch {
	case e.Type == watcher.EventFetched && ofRemote && e.Err == nil:
		m.fetched = true
	case e.Type == watcher.EventPolled && ofRemote && e.Err == nil:
		if !m.fetched {
			m.sync("noop", e.Duration)
		}
		m.fetched = false
	case (e.Type == watcher.EventDeliveryFailed || e.Type == watcher.EventTargetFailed || e.Type == watcher.EventRefVanished ||
		e.Type == watcher.EventInvalidTarget) && mine:
		m.sync("error", e.Duration)
	case e.Type == watcher.EventPolled && ofRemote:
		m.fetched = false // failed: its target's failure counted it
	}
}

// success counts a sync of the --repo target that published its worktree
// (or the first of the process), as the worktree sink reports it.
// git-sync fetches whenever the commit changed, to one it had before too
// (a branch moved back); the mirror needs no fetch for that one, but
// git-sync's count is of syncs that fetch.
func (m *gitSyncMetrics) success(took time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fetches.Inc()
	m.sync("success", took)
}

// askpass counts an --askpass-url call. A failed one fails the sync
// attempt that asked, which observe counts.
func (m *gitSyncMetrics) askpass(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.askpassCalls.WithLabelValues("error").Inc()
		return
	}
	m.askpassCalls.WithLabelValues("success").Inc()
}

func (m *gitSyncMetrics) sync(status string, d time.Duration) {
	m.count.WithLabelValues(status).Inc()
	m.duration.WithLabelValues(status).Observe(d.Seconds())
}
