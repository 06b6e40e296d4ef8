package fluxartifact

import (
	"context"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Flux's reasons for a GitRepository that cannot be fetched.
const (
	condReconciling       = "Reconciling"
	condFetchFailed       = "FetchFailed"
	reasonGitOperation    = "GitOperationFailed"
	reasonProgressingWith = "ProgressingWithRetry"
)

// failures are the failing targets whose GitRepositories' conditions are
// to be written, the latest failure of each; a delivery drops its
// target's.
type failures struct {
	mu      sync.Mutex
	pending map[string]failure // by GitRepository key
	wake    chan struct{}
}

type failure struct {
	repo    payload.GitRepository
	message string
}

// Observe is the sink's [watcher.Observer]: a target that fails (its
// repository, ref or credentials cannot be read) gets Flux's conditions on
// its GitRepository, as source-controller writes them for a failed fetch:
// Ready false and FetchFailed true with reason GitOperationFailed, and
// Reconciling, its artifact kept. Register the sink as an observer too
// (watcher.WithObserver) for them; [Sink.Run] writes them.
func (s *Sink) Observe(e watcher.Event) {
	if e.Target == nil || (e.Type == watcher.EventTargetFailed && e.Err == nil) {
		return
	}
	repo, ok := payload.Of[payload.GitRepository](*e.Target)
	if !ok || repo.Validate() != nil {
		return
	}
	f := &s.failures
	f.mu.Lock()
	defer f.mu.Unlock()
	switch e.Type {
	case watcher.EventTargetFailed:
		if f.pending == nil {
			f.pending = map[string]failure{}
		}
		err := e.Err
		if r, ok := errors.AsType[*watcher.RetryError](err); ok {
			err = r.Err // when it is tried next changes at every poll: not written
		}
		f.pending[repo.Key()] = failure{repo, "failed to checkout and determine revision: " + err.Error()}
		select {
		case f.wake <- struct{}{}:
		default:
		}
	case watcher.EventDelivered, watcher.EventUpToDate, watcher.EventRemoved, watcher.EventForgotten:
		delete(f.pending, repo.Key())
	}
}

// Run writes the failures observed until ctx ends.
func (s *Sink) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.failures.wake:
		}
		s.failures.mu.Lock()
		batch := s.failures.pending
		s.failures.pending = nil
		s.failures.mu.Unlock()
		for _, f := range batch {
			_ = s.writeFailure(ctx, f) // the next failure of the target writes again
		}
	}
}

// writeFailure writes f into its GitRepository's conditions, if it is the
// target's object at the target's generation and they say otherwise.
func (s *Sink) writeFailure(ctx context.Context, f failure) error {
	res := s.resource(f.repo)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := res.Get(ctx, f.repo.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.current(u, f.repo) != nil {
			return nil // another object, or a later spec: not this failure's
		}
		if changed := setFailure(u, f.message, metav1.Now()); !handled(u, f.repo.RequestedAt) && !changed {
			return nil
		}
		_, err = res.UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: "modwatch-fluxartifact"})
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("fluxartifact: GitRepository %s: writing its failure: %w", f.repo.Key(), err)
		}
		return err
	})
}

// setFailure sets the conditions of a failed fetch with message; false
// when they were so already.
func setFailure(u *unstructured.Unstructured, message string, now metav1.Time) bool {
	gen := u.GetGeneration()
	want := map[string]map[string]any{
		condReconciling: {"status": "True", "reason": reasonProgressingWith, "message": "building artifact"},
		condReady:       {"status": "False", "reason": reasonGitOperation, "message": message},
		condFetchFailed: {"status": "True", "reason": reasonGitOperation, "message": message},
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	changed := false
	var out []any
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		t, _ := m["type"].(string)
		w, ours := want[t]
		if !ours {
			out = append(out, m)
			continue
		}
		delete(want, t)
		same := m["status"] == w["status"] && m["reason"] == w["reason"] && m["message"] == w["message"] && m["observedGeneration"] == gen
		if !same {
			changed = true
			if m["status"] != w["status"] {
				m["lastTransitionTime"] = now.UTC().Format("2006-01-02T15:04:05Z")
			}
			for k, v := range w {
				m[k] = v
			}
			m["observedGeneration"] = gen
		}
		out = append(out, m)
	}
	for _, t := range []string{condReconciling, condReady, condFetchFailed} {
		if w, missing := want[t]; missing {
			changed = true
			m := map[string]any{"type": t, "observedGeneration": gen, "lastTransitionTime": now.UTC().Format("2006-01-02T15:04:05Z")}
			for k, v := range w {
				m[k] = v
			}
			out = append(out, m)
		}
	}
	if changed {
		_ = unstructured.SetNestedSlice(u.Object, out, "status", "conditions")
	}
	return changed
}
