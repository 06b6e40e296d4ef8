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
	condStalled           = "Stalled"
	condSourceVerified    = "SourceVerified"
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
	// written are the refusals written, which the watcher reports again
	// at every set the source gives: each is read and written once.
	written map[string]failure
}

type failure struct {
	repo    payload.GitRepository
	message string
	reason  string // Flux's
	stalled bool   // only a change of the spec clears it
	refused bool   // the source's refusal (watcher.Refused)
}

// refusal is the failure of a GitRepository its source does not watch
// (watcher.Refused): its reason, stalled or not, as the source says
// (payload.GitRepositoryError), else GitOperationFailed, retried.
func refusal(repo payload.GitRepository, err error) failure {
	f := failure{repo: repo, message: err.Error(), reason: reasonGitOperation, refused: true}
	if e, ok := errors.AsType[*payload.GitRepositoryError](err); ok {
		f.message, f.reason, f.stalled = e.Err.Error(), e.Reason, e.Stalled
	}
	return f
}

// Observe is the sink's [watcher.Observer]: a target that fails (its
// repository, ref or credentials cannot be read) gets Flux's conditions on
// its GitRepository, as source-controller writes them for a failed fetch:
// Ready false and FetchFailed true with reason GitOperationFailed, and
// Reconciling, its artifact kept. A GitRepository its source refused
// (watcher.Refused) gets them with the source's reason
// (payload.GitRepositoryError), and Stalled instead of Reconciling when
// only a change of its spec can clear it. Register the sink as an
// observer too (watcher.WithObserver) for them; [Sink.Run] writes them.
func (s *Sink) Observe(e watcher.Event) {
	if e.Target == nil || e.Err == nil && (e.Type == watcher.EventTargetFailed || e.Type == watcher.EventInvalidTarget) {
		return
	}
	t := *e.Target
	if e.Type == watcher.EventInvalidTarget {
		t = watcher.Target{Payload: t.RefusedPayload()}
	}
	repo, ok := payload.Of[payload.GitRepository](t)
	if !ok || repo.Validate() != nil {
		return
	}
	f := &s.failures
	f.mu.Lock()
	defer f.mu.Unlock()
	switch e.Type {
	case watcher.EventTargetFailed, watcher.EventInvalidTarget:
		if f.pending == nil {
			f.pending = map[string]failure{}
		}
		err := e.Err
		if r, ok := errors.AsType[*watcher.RetryError](err); ok {
			err = r.Err // when it is tried next changes at every poll: not written
		}
		if e.Type == watcher.EventInvalidTarget {
			r := refusal(repo, err)
			if f.written[repo.Key()] == r {
				return
			}
			f.pending[repo.Key()] = r
		} else {
			delete(f.written, repo.Key())
			f.pending[repo.Key()] = failure{repo: repo, message: "failed to checkout and determine revision: " + err.Error(), reason: reasonGitOperation}
		}
		select {
		case f.wake <- struct{}{}:
		default:
		}
	case watcher.EventDelivered, watcher.EventUpToDate, watcher.EventRemoved, watcher.EventForgotten:
		delete(f.pending, repo.Key())
		delete(f.written, repo.Key())
	}
}

// forget drops what is kept of the GitRepository key, which is gone.
func (f *failures) forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pending, key)
	delete(f.written, key)
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
		for k, f := range batch {
			if s.writeFailure(ctx, f) == nil && f.refused { // else the next failure of the target writes again
				s.failures.mu.Lock()
				if _, later := s.failures.pending[k]; !later {
					if s.failures.written == nil {
						s.failures.written = map[string]failure{}
					}
					s.failures.written[k] = f
				}
				s.failures.mu.Unlock()
			}
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
		if changed := setFailure(u, f, metav1.Now()); !handled(u, f.repo.RequestedAt) && !changed {
			return nil
		}
		_, err = res.UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: "modwatch-fluxartifact"})
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("fluxartifact: GitRepository %s: writing its failure: %w", f.repo.Key(), err)
		}
		return err
	})
}

// setFailure sets the conditions of f: Ready false, FetchFailed true,
// and Reconciling (being retried), or Stalled with observedGeneration
// (done with this generation); false when they were so already.
func setFailure(u *unstructured.Unstructured, f failure, now metav1.Time) bool {
	gen := u.GetGeneration()
	// What failed: the fetch, or the verification of its signatures (as
	// source-controller has it: SourceVerified false, nothing fetched
	// failed).
	failed, failedWant := condFetchFailed, map[string]any{"status": "True", "reason": f.reason, "message": f.message}
	if verification[f.reason] {
		failed, failedWant = condSourceVerified, map[string]any{"status": "False", "reason": f.reason, "message": f.message}
	}
	want := map[string]map[string]any{
		condReady: {"status": "False", "reason": f.reason, "message": f.message},
		failed:    failedWant,
	}
	drop, order := condStalled, []string{condReconciling, condReady, failed}
	if f.stalled {
		want[condStalled] = map[string]any{"status": "True", "reason": f.reason, "message": f.message}
		drop, order = condReconciling, []string{condStalled, condReady, failed}
	} else {
		want[condReconciling] = map[string]any{"status": "True", "reason": reasonProgressingWith, "message": "building artifact"}
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
		if t == drop {
			changed = true
			continue
		}
		if w, ours := want[t]; ours {
			delete(want, t)
			changed = setCondition(m, w, gen, now) || changed
		}
		out = append(out, m)
	}
	for _, t := range order {
		if w, missing := want[t]; missing {
			changed = true
			m := map[string]any{"type": t}
			setCondition(m, w, gen, now)
			out = append(out, m)
		}
	}
	if f.stalled {
		if g, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); g != gen {
			changed = true
			_ = unstructured.SetNestedField(u.Object, gen, "status", "observedGeneration")
		}
	}
	if changed {
		_ = unstructured.SetNestedSlice(u.Object, out, "status", "conditions")
	}
	return changed
}

// verification are Flux's reasons of a verification that failed.
var verification = map[string]bool{"InvalidVerificationMode": true, "VerificationError": true, "InvalidCommitSignature": true, "InvalidTagSignature": true, "InvalidGitObject": true}

// setCondition makes m say w at generation gen; false when it did.
func setCondition(m, w map[string]any, gen int64, now metav1.Time) bool {
	if m["status"] == w["status"] && m["reason"] == w["reason"] && m["message"] == w["message"] && m["observedGeneration"] == gen {
		return false
	}
	if m["status"] != w["status"] || m["lastTransitionTime"] == nil {
		m["lastTransitionTime"] = now.UTC().Format("2006-01-02T15:04:05Z")
	}
	for k, v := range w {
		m[k] = v
	}
	m["observedGeneration"] = gen
	return true
}
