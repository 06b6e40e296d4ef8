package main

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// hookRunner runs a hook for the latest hash it was sent, as git-sync's
// hook runner: a sync never waits for it, a hash sent while a run is under
// way replaces one not yet run, and a failed run is retried after backoff
// until it succeeds. With once (--one-time) it runs one time only and
// reports how that went to wait.
type hookRunner struct {
	name    string
	do      func(ctx context.Context, hash string) error
	backoff time.Duration
	once    bool
	log     logr.Logger
	runs    *prometheus.CounterVec // git_sync_hook_run_count_total{name,status}

	mu    sync.Mutex
	hash  string
	sent  bool
	wake  chan struct{}
	first chan error // the outcome of the first run, once
}

func newHookRunner(name string, do func(context.Context, string) error, backoff time.Duration, once bool, log logr.Logger, runs *prometheus.CounterVec) *hookRunner {
	return &hookRunner{name: name, do: do, backoff: backoff, once: once, log: log.WithName(name), runs: runs,
		wake: make(chan struct{}, 1), first: make(chan error, 1)}
}

// send asks for a run at hash; it never blocks.
func (r *hookRunner) send(hash string) {
	r.mu.Lock()
	r.hash, r.sent = hash, true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// wasSent reports whether send was ever called.
func (r *hookRunner) wasSent() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent
}

// wait returns the outcome of the first run, or ctx's error.
func (r *hookRunner) wait(ctx context.Context) error {
	select {
	case err := <-r.first:
		r.first <- err // for the next to ask
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run runs the hook until ctx ends.
func (r *hookRunner) run(ctx context.Context) {
	var done string // the last hash the hook succeeded at
	reported := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		for {
			r.mu.Lock()
			hash := r.hash
			r.mu.Unlock()
			if hash == done {
				break
			}
			err := r.do(ctx, hash)
			if ctx.Err() != nil {
				return
			}
			if !reported {
				reported = true
				r.first <- err
			}
			if err == nil {
				r.runs.WithLabelValues(r.name, "success").Inc()
				done = hash
				break
			}
			r.runs.WithLabelValues(r.name, "error").Inc()
			r.log.Error(err, "hook failed", "hash", hash, "retry", r.backoff)
			if r.once {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(r.backoff):
			}
		}
	}
}
