// Package metrics exports what a watcher does as Prometheus metrics, on a
// Registerer the caller passes (nothing is registered globally). Several
// watchers of one process on one Registerer share the counters and
// histograms; the gauges are the last one's.
//
//	m, err := metrics.New(reg)
//	w := watcher.New(watcher.WithObserver(m))
//	err = m.CollectStats(w)
//
// Metrics (all prefixed modwatch_): polls_total{remote,result},
// ref_listing_seconds{remote}, fetch_seconds{remote}, mirror_rebuilds_total
// {remote}, target_failures_total{remote}, deliveries_total{sink,result},
// delivery_seconds{sink}, delivery_lag_seconds{sink} (commit first seen to
// sink success), and the gauges targets, remotes, deliveries_retrying,
// kept_trees (trees that sinks kept after Deliver returned, not released:
// see watcher.WithKeptTrees) and kept_pack_bytes
// (the replaced packs on disk that only trees handed out read).
package metrics

import (
	"errors"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
)

// Metrics is a watcher.Observer that keeps the watcher's metrics.
type Metrics struct {
	reg         prometheus.Registerer
	polls       *prometheus.CounterVec
	listing     *prometheus.HistogramVec
	fetch       *prometheus.HistogramVec
	rebuilds    *prometheus.CounterVec
	failures    *prometheus.CounterVec
	deliveries  *prometheus.CounterVec
	deliverTime *prometheus.HistogramVec
	lag         *prometheus.HistogramVec
	requests    *prometheus.CounterVec
	waited      *prometheus.CounterVec
	limits      *prometheus.CounterVec
}

var _ watcher.Observer = (*Metrics)(nil)

// New creates the metrics and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	seconds := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	m := &Metrics{
		reg: reg,
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modwatch_polls_total", Help: "Polls of a remote, by result.",
		}, []string{"remote", "result"}),
		listing: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "modwatch_ref_listing_seconds", Help: "Duration of one ref listing.", Buckets: seconds,
		}, []string{"remote"}),
		fetch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "modwatch_fetch_seconds", Help: "Duration of one fetch into a mirror.", Buckets: seconds,
		}, []string{"remote"}),
		rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modwatch_mirror_rebuilds_total", Help: "Mirrors rebuilt after corruption or a crash.",
		}, []string{"remote"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modwatch_target_failures_total", Help: "Polls in which a target could not be brought to a commit.",
		}, []string{"remote"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modwatch_deliveries_total", Help: "Deliveries to a sink, by result.",
		}, []string{"sink", "result"}),
		deliverTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "modwatch_delivery_seconds", Help: "Duration of one delivery.", Buckets: seconds,
		}, []string{"sink"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "modwatch_delivery_lag_seconds", Help: "From a commit first seen to the sink's success.", Buckets: seconds,
		}, []string{"sink"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modwatch_host_requests_total",
			Help: "Listings and fetches sent to a host, by kind (list, fetch) and answer (its HTTP status when known; ok or error otherwise).",
		}, []string{"host", "kind", "code"}),
		waited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modwatch_host_wait_seconds_total", Help: "Time listings and fetches waited for their turn at a host (its budget, its rate limit).",
		}, []string{"host"}),
		limits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modwatch_host_rate_limits_total", Help: "Rate limits a host answered with, once an episode: no request went to it until their end.",
		}, []string{"host"}),
	}
	errs := make([]error, 11)
	m.polls, errs[0] = register(reg, m.polls)
	m.listing, errs[1] = register(reg, m.listing)
	m.fetch, errs[2] = register(reg, m.fetch)
	m.rebuilds, errs[3] = register(reg, m.rebuilds)
	m.failures, errs[4] = register(reg, m.failures)
	m.deliveries, errs[5] = register(reg, m.deliveries)
	m.deliverTime, errs[6] = register(reg, m.deliverTime)
	m.lag, errs[7] = register(reg, m.lag)
	m.requests, errs[8] = register(reg, m.requests)
	m.waited, errs[9] = register(reg, m.waited)
	m.limits, errs[10] = register(reg, m.limits)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c on reg; when another watcher of the process
// registered the same metric there, its collector is returned, shared.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// CollectStats registers gauges read from w at each scrape: targets,
// remotes, deliveries waiting for a retry, removals the deletion budget
// holds, sources without a set, and the trees sinks kept and the bytes of
// packs they keep on disk.
func (m *Metrics) CollectStats(w *watcher.Watcher) error {
	for _, g := range []struct {
		name, help string
		value      func(watcher.Stats) int64
	}{
		{"modwatch_targets", "Valid targets of all routes.", func(s watcher.Stats) int64 { return int64(s.Targets) }},
		{"modwatch_remotes", "Repositories polled.", func(s watcher.Stats) int64 { return int64(s.Remotes) }},
		{"modwatch_deliveries_retrying", "Deliveries waiting to be retried.", func(s watcher.Stats) int64 { return int64(s.Retrying) }},
		{"modwatch_removals_held", "Targets whose removal the deletion budget holds.", func(s watcher.Stats) int64 { return int64(s.RemovalsHeld) }},
		{"modwatch_sources_without_set", "Routes whose source cannot give its set now; their last sets stay.", func(s watcher.Stats) int64 { return int64(s.NoSet) }},
		{"modwatch_kept_trees", "Trees that sinks kept after their delivery returned, not released yet.", func(s watcher.Stats) int64 { return int64(s.KeptTrees) }},
		{"modwatch_kept_pack_bytes", "Bytes of replaced packs kept on disk for trees handed out.", func(s watcher.Stats) int64 { return s.KeptPackBytes }},
	} {
		value := g.value
		gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help},
			func() float64 { return float64(value(w.Stats())) })
		if err := m.reg.Register(gauge); err != nil {
			// Another watcher of the process has them: this one's count.
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) || !m.reg.Unregister(are.ExistingCollector) {
				return err
			}
			if err := m.reg.Register(gauge); err != nil {
				return err
			}
		}
	}
	return nil
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}

// Observe implements watcher.Observer.
func (m *Metrics) Observe(e watcher.Event) {
	switch e.Type {
	case watcher.EventPolled:
		m.polls.WithLabelValues(e.Remote, result(e.Err)).Inc()
	case watcher.EventListed:
		if e.Err == nil {
			m.listing.WithLabelValues(e.Remote).Observe(e.Duration.Seconds())
		}
		m.hostRequest(e, "list")
	case watcher.EventFetched:
		if e.Err == nil {
			m.fetch.WithLabelValues(e.Remote).Observe(e.Duration.Seconds())
		}
		m.hostRequest(e, "fetch")
	case watcher.EventRateLimited:
		m.limits.WithLabelValues(host(e.Remote)).Inc()
	case watcher.EventMirrorRebuilt:
		m.rebuilds.WithLabelValues(e.Remote).Inc()
	case watcher.EventTargetFailed:
		m.failures.WithLabelValues(e.Remote).Inc()
	case watcher.EventDelivered:
		m.deliveries.WithLabelValues(e.Sink, "success").Inc()
		m.deliverTime.WithLabelValues(e.Sink).Observe(e.Duration.Seconds())
		if !e.Seen.IsZero() {
			m.lag.WithLabelValues(e.Sink).Observe(e.Time.Sub(e.Seen).Seconds())
		}
	case watcher.EventDeliveryFailed:
		m.deliveries.WithLabelValues(e.Sink, "error").Inc()
	}
}

// hostRequest counts a listing or fetch at its host, and its wait.
func (m *Metrics) hostRequest(e watcher.Event, kind string) {
	h := host(e.Remote)
	code := "ok"
	switch status, ok := gitutil.HTTPStatus(e.Err); {
	case ok:
		code = strconv.Itoa(status)
	case e.Err != nil:
		code = "error"
	case isHTTP(e.Remote):
		code = "200"
	}
	m.requests.WithLabelValues(h, kind, code).Inc()
	if e.Waited > 0 {
		m.waited.WithLabelValues(h).Add(e.Waited.Seconds())
	}
}

// host is the host of a remote's URL, "" for a local one.
func host(remote string) string {
	e, err := gitutil.ParseURL(remote)
	if err != nil || e.Scheme == "file" {
		return ""
	}
	return e.Host
}

func isHTTP(remote string) bool {
	e, err := gitutil.ParseURL(remote)
	return err == nil && (e.Scheme == "http" || e.Scheme == "https")
}
