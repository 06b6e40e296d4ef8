package fluxartifact

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
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
	// written are the refusals written (a digest of each), which the
	// watcher reports again at every set the source gives: each is read
	// and written once. A refused object that is deleted is not reported:
	// past maxWritten objects the map starts again (a refusal is then read
	// again, and written only when the object does not say it).
	written map[string]uint64
	// delivering is when the last delivery of each object began: a
	// failure observed before it is older than what it writes.
	delivering map[string]time.Time
	// failedAt is when each object's target last failed: news that its
	// sink has the commit, from an earlier poll (a deliverer may report
	// it late), does not end it. Bounded as written is.
	failedAt map[string]time.Time
}

// maxWritten bounds what failures keeps of each object.
const maxWritten = 1 << 16

// keep sets m[key] = v, m made or started again at maxWritten.
func keep[V any](m *map[string]V, key string, v V) {
	if *m == nil || len(*m) >= maxWritten {
		*m = map[string]V{}
	}
	(*m)[key] = v
}

// delivery records that a delivery of key began at.
func (f *failures) delivery(key string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keep(&f.delivering, key, at)
}

// superseded reports whether a delivery of key began after fl was
// observed: what it wrote is newer.
func (f *failures) superseded(key string, fl failure) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fl.at.Before(f.delivering[key])
}

// digest is what written keeps of a refusal.
func (fl failure) digest() uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00%s\x00%s\x00%t", fl.repo.UID, fl.repo.Generation, fl.repo.RequestedAt, fl.reason, fl.message, fl.stalled)
	return h.Sum64()
}

type failure struct {
	repo    payload.GitRepository
	message string
	reason  string // Flux's
	stalled bool   // only a change of the spec clears it
	refused bool   // the source's refusal (watcher.Refused)
	// recovered: no failure, but the end of one: the target is at the
	// commit its artifact is of again (watcher.EventTargetRecovered, or
	// EventUpToDate: after a start, nothing says whether a failure was
	// written before).
	recovered bool
	commit    gitutil.Hash // the commit its sink has, when recovered
	at        time.Time    // when it was observed
	tries     int          // a recovery's writes that failed
}

// fetchFailure is the failure of a target that could not be brought to
// a commit: a signature that does not verify is the verification's, with
// Flux's reasons (InvalidTagSignature, InvalidCommitSignature), else the
// fetch's (GitOperationFailed).
func fetchFailure(repo payload.GitRepository, err error, at time.Time) failure {
	f := failure{repo: repo, message: "failed to checkout and determine revision: " + err.Error(), reason: reasonGitOperation, at: at}
	if errors.Is(err, mirror.ErrUnverified) {
		f.message, f.reason = "signature verification failed: "+err.Error(), "InvalidCommitSignature"
		switch msg := err.Error(); {
		case strings.Contains(msg, "is not an annotated tag"):
			f.reason = "InvalidGitObject"
		case strings.Contains(msg, mirror.ErrUnverified.Error()+": tag "):
			f.reason = "InvalidTagSignature"
		}
	}
	return f
}

// refusal is the failure of a GitRepository its source does not watch
// (watcher.Refused): its reason, stalled or not, as the source says
// (payload.GitRepositoryError), else GitOperationFailed, retried.
func refusal(repo payload.GitRepository, err error, at time.Time) failure {
	f := failure{repo: repo, message: err.Error(), reason: reasonGitOperation, refused: true, at: at}
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
// only a change of its spec can clear it. A target that recovers at the
// commit it was served at (watcher.EventTargetRecovered, EventUpToDate)
// has its GitRepository Ready again. Register the sink as an observer too
// (watcher.WithObserver) for them; [Sink.Run] writes them.
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
	key, at := repo.Key(), cmp.Or(e.Time, time.Now())
	switch e.Type {
	case watcher.EventTargetFailed, watcher.EventInvalidTarget:
		keep(&f.failedAt, key, at)
		err := e.Err
		if r, ok := errors.AsType[*watcher.RetryError](err); ok {
			err = r.Err // when it is tried next changes at every poll: not written
		}
		if e.Type == watcher.EventTargetFailed {
			delete(f.written, key)
			f.queue(key, fetchFailure(repo, err, at))
		} else if r := refusal(repo, err, at); f.written[key] != r.digest() {
			f.queue(key, r)
		}
	case watcher.EventUpToDate: // its sink has e.Commit: a failure it said ends
		if polled := cmp.Or(e.Seen, at); polled.Before(f.failedAt[key]) {
			return // the news of an earlier poll than the failure's
		}
		delete(f.written, key)
		f.queue(key, failure{repo: repo, recovered: true, commit: e.Commit, at: at})
	case watcher.EventDelivered, watcher.EventRemoved, watcher.EventForgotten:
		delete(f.pending, key)
		delete(f.written, key)
	}
}

// queue makes fl the next write of key's status, under f.mu, and wakes Run.
func (f *failures) queue(key string, fl failure) {
	if f.pending == nil {
		f.pending = map[string]failure{}
	}
	f.pending[key] = fl
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// forget drops what is kept of the GitRepository key, which is gone.
func (f *failures) forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pending, key)
	delete(f.written, key)
	delete(f.delivering, key)
	delete(f.failedAt, key)
}

// writeTimeout bounds the writing of one failure or recovery, its turn
// at the object included.
const writeTimeout = 30 * time.Second

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
			s.failures.wrote(k, f, s.writeFailure(ctx, f))
		}
	}
}

// wrote takes the outcome of fl's write: a refusal written is kept (not
// read again while it holds); a recovery that failed is tried again, a
// few times, later (nothing else would say it: no event follows); a
// failure that failed is written again by the next one, at the next poll.
func (f *failures) wrote(key string, fl failure, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, later := f.pending[key]; later {
		return
	}
	switch {
	case err == nil && fl.refused:
		keep(&f.written, key, fl.digest())
	case err != nil && fl.recovered && fl.tries < 5:
		fl.tries++
		time.AfterFunc(time.Duration(fl.tries)*2*time.Second, func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if _, later := f.pending[key]; !later && !fl.at.Before(f.failedAt[key]) {
				f.queue(key, fl)
			}
		})
	}
}

// writeFailure writes f into its GitRepository's conditions, if it is the
// target's object at the target's generation and they say otherwise.
func (s *Sink) writeFailure(ctx context.Context, f failure) error {
	res := s.resource(f.repo)
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	unlock, err := s.writes.lockCtx(ctx, f.repo.Key())
	if err != nil {
		return err
	}
	defer unlock()
	if s.failures.superseded(f.repo.Key(), f) {
		return nil // a delivery began since: what it wrote is newer
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := res.Get(ctx, f.repo.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.current(u, f.repo) != nil {
			return nil // another object, or a later spec: not this failure's
		}
		if f.recovered {
			if !restore(u, s.url(""), f.commit, f.repo.RequestedAt, metav1.Now()) {
				return nil
			}
		} else if changed := setFailure(u, f, metav1.Now()); !handled(u, f.repo.RequestedAt) && !changed {
			return nil
		}
		_, err = res.UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: "modwatch-fluxartifact"})
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("fluxartifact: GitRepository %s: writing its failure: %w", f.repo.Key(), err)
		}
		return err
	})
}

// setFailure sets the conditions of f: Ready false, FetchFailed true
// (or SourceVerified false), and Reconciling (being retried), or Stalled
// with observedGeneration (done with this generation); false when they
// were so already.
func setFailure(u *unstructured.Unstructured, f failure, now metav1.Time) bool {
	gen := u.GetGeneration()
	want, order, drop := failureConditions(f)
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	changed := false
	var out []any
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		t, _ := m["type"].(string)
		if drop(t, m) {
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

// failureConditions are the conditions f sets, by type and in the order
// they are added, and the conditions it ends. What failed is the fetch,
// or the verification of the signatures, as source-controller has it:
// SourceVerified false, FetchFailed gone (the fetch succeeded); a fetch
// that failed ends a failed verification (source-controller deletes it
// at each reconciliation).
func failureConditions(f failure) (want map[string]map[string]any, order []string, drop func(t string, m map[string]any) bool) {
	failed, failedWant, ended := condFetchFailed, map[string]any{"status": "True", "reason": f.reason, "message": f.message}, condSourceVerified
	if c := includeCondition(f.reason); c != "" {
		failed, ended = c, condFetchFailed // fetched: what failed is an include
	}
	if verification(f.reason) {
		failed, failedWant, ended = condSourceVerified, map[string]any{"status": "False", "reason": f.reason, "message": f.message}, condFetchFailed
	}
	want = map[string]map[string]any{
		condReady: {"status": "False", "reason": f.reason, "message": f.message},
		failed:    failedWant,
	}
	progress, gone := condReconciling, condStalled
	if f.stalled {
		want[condStalled] = map[string]any{"status": "True", "reason": f.reason, "message": f.message}
		progress, gone = condStalled, condReconciling
	} else {
		want[condReconciling] = map[string]any{"status": "True", "reason": reasonProgressingWith, "message": "building artifact"}
	}
	drop = func(t string, m map[string]any) bool {
		return t == gone || t == ended && (t == condFetchFailed || m["status"] == "False")
	}
	return want, []string{progress, condReady, failed}, drop
}

// includeCondition is the condition source-controller says a failed
// include with (IncludeUnavailable, or StorageOperationFailed for one
// that could not be put in), "" when reason is not an include's.
func includeCondition(reason string) string {
	switch reason {
	case "NotFound", "NoArtifact":
		return "IncludeUnavailable"
	case reasonCopyFailure, reasonIllegalPath:
		return "StorageOperationFailed"
	}
	return ""
}

// includeFailed has the failure to put repo's includes in written, and
// returns it for the delivery to be tried again (a delivery given up on
// writes nothing).
func (s *Sink) includeFailed(ctx context.Context, repo payload.GitRepository, err error) error {
	err = fmt.Errorf("fluxartifact: GitRepository %s: %w", repo.Key(), err)
	if ctx.Err() != nil {
		return err
	}
	reason := reasonCopyFailure
	if e, ok := errors.AsType[*includeError](err); ok {
		reason = e.reason
	}
	f := &s.failures
	f.mu.Lock()
	defer f.mu.Unlock()
	at := time.Now()
	keep(&f.failedAt, repo.Key(), at)
	delete(f.written, repo.Key())
	f.queue(repo.Key(), failure{repo: repo, message: err.Error(), reason: reason, at: at})
	return err
}

// verification reports whether reason is Flux's for a verification that
// failed.
func verification(reason string) bool {
	switch reason {
	case "InvalidVerificationMode", "VerificationError", "InvalidCommitSignature", "InvalidTagSignature", "InvalidGitObject":
		return true
	}
	return false
}

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
