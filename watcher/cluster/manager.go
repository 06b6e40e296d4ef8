package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/metrics"
)

// Runnable is a watcher as a controller-runtime [manager.Runnable], with
// checks for the Manager's health and readiness endpoints.
type Runnable struct {
	log    logr.Logger // the Manager's, when its Start's ctx has none
	w      *watcher.Watcher
	leader bool

	mu      sync.Mutex
	running bool
	failed  error
}

var (
	_ manager.Runnable               = (*Runnable)(nil)
	_ manager.LeaderElectionRunnable = (*Runnable)(nil)
)

// Options say how a Manager runs a watcher, as controller-runtime's
// manager.Options say how it runs its own. The zero value runs it on every
// replica.
type Options struct {
	// LeaderElection runs the watcher on the elected leader only (one
	// replica polls everything): the Runnable's NeedLeaderElection says
	// so. Default false: on every replica, which suits a watcher given a
	// [LeaseShard].
	LeaderElection bool
}

// NewRunnable wraps w, to run as o says.
func NewRunnable(w *watcher.Watcher, o Options) *Runnable {
	return &Runnable{w: w, leader: o.LeaderElection}
}

// Start runs the watcher until ctx ends, with ctx's logger or, when it has
// none (a Manager gives its runnables a bare context), the Manager's.
func (r *Runnable) Start(ctx context.Context) error {
	if _, err := logr.FromContext(ctx); err != nil && r.log.GetSink() != nil {
		ctx = logr.NewContext(ctx, r.log)
	}
	r.mu.Lock()
	r.running = true
	r.mu.Unlock()
	err := r.w.Run(ctx)
	r.mu.Lock()
	r.running, r.failed = false, err
	r.mu.Unlock()
	return err
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: it is
// [Options.LeaderElection].
func (r *Runnable) NeedLeaderElection() bool { return r.leader }

// Healthz fails once the watcher stopped with an error (a source failed):
// restarting the process is the cure. A replica that waits for the
// leadership is healthy.
func (r *Runnable) Healthz(*http.Request) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed != nil {
		return fmt.Errorf("watcher stopped: %w", r.failed)
	}
	return nil
}

// Readyz fails while a running watcher's sources have not all given their
// targets. Failing targets do not make it unready: they are the
// repositories' trouble, reported by events and metrics, and an unready
// replica would stop receiving the push hints that cure them.
func (r *Runnable) Readyz(*http.Request) error {
	r.mu.Lock()
	running := r.running
	r.mu.Unlock()
	if running && !r.w.Stats().Synced {
		return errors.New("watcher: sources not synced yet")
	}
	return nil
}

// NewWatcher makes a watcher with opts that runs in mgr, in one line: its
// metrics (watcher/metrics) on controller-runtime's registry, which the
// Manager serves, its health and readiness checks, and a Runnable that runs
// it with the Manager as o says. Route it before mgr.Start.
func NewWatcher(mgr manager.Manager, o Options, opts ...watcher.Option) (*watcher.Watcher, error) {
	m, err := metrics.New(ctrlmetrics.Registry)
	if err != nil {
		return nil, err
	}
	w := watcher.New(append(opts, watcher.WithObserver(m))...)
	if err := m.CollectStats(w); err != nil {
		return nil, err
	}
	if _, err := AddToManager(mgr, w, o); err != nil {
		return nil, err
	}
	return w, nil
}

// AddToManager adds w to mgr, run as o says, with its health and readiness
// checks named "modwatch". For metrics, give the watcher watcher/metrics
// registered on controller-runtime's registry
// (sigs.k8s.io/controller-runtime/pkg/metrics.Registry), or make it with
// [NewWatcher].
func AddToManager(mgr manager.Manager, w *watcher.Watcher, o Options) (*Runnable, error) {
	r := NewRunnable(w, o)
	r.log = mgr.GetLogger().WithName("modwatch")
	if err := mgr.Add(r); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("modwatch", healthz.Checker(r.Healthz)); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("modwatch", healthz.Checker(r.Readyz)); err != nil {
		return nil, err
	}
	return r, nil
}
