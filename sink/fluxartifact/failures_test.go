package fluxartifact

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// A failed fetch's conditions are Flux's; written again only when they
// change, their transition kept while their status holds, the others
// kept.
func TestAFailedFetchsConditionsAreFluxs(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"generation": int64(2)},
		"status": map[string]any{"conditions": []any{
			map[string]any{"type": "ArtifactInStorage", "status": "True", "reason": "Succeeded"},
			map[string]any{"type": "Ready", "status": "True", "reason": "Succeeded", "lastTransitionTime": "2026-01-01T00:00:00Z"},
		}},
	}}
	t1 := metav1.NewTime(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	f := func(msg string) failure { return failure{message: msg, reason: reasonGitOperation} }
	require.True(t, setFailure(u, f("no ref"), t1))
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	got := map[string]map[string]any{}
	for _, c := range conds {
		got[c.(map[string]any)["type"].(string)] = c.(map[string]any)
	}
	assert.Equal(t, "True", got["ArtifactInStorage"]["status"], "its artifact kept")
	assert.Equal(t, map[string]any{"type": "Ready", "status": "False", "reason": "GitOperationFailed", "message": "no ref", "observedGeneration": int64(2), "lastTransitionTime": "2026-12-05T12:00:00Z"}, got["Ready"])
	assert.Equal(t, "GitOperationFailed", got["FetchFailed"]["reason"])
	assert.Equal(t, "ProgressingWithRetry", got["Reconciling"]["reason"])

	t2 := metav1.NewTime(t1.Add(time.Minute))
	assert.False(t, setFailure(u, f("no ref"), t2), "the same failure: nothing to write")
	require.True(t, setFailure(u, f("still no ref"), t2))
	conds, _, _ = unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m := c.(map[string]any); m["type"] == "Ready" {
			assert.Equal(t, "still no ref", m["message"])
			assert.Equal(t, "2026-12-05T12:00:00Z", m["lastTransitionTime"], "false since the first failure")
		}
	}
}

// A GitRepository its source refused has the source's reason; Stalled,
// with its generation observed, when only a change of its spec clears
// it, and retried (Reconciling) otherwise; each replaces the other.
func TestARefusedGitRepositoryIsStalledWithItsReason(t *testing.T) {
	dyn, repo := fakeRepo(map[string]any{"branch": "main"})
	s, err := New(dyn, Config{Storage: t.TempDir(), Address: "h"})
	require.NoError(t, err)
	defer s.Close()
	refuse := func(err error) {
		target := watcher.Refused(watcher.Target{ID: "flux/ns/app", Payload: repo}, err)
		s.Observe(watcher.Event{Type: watcher.EventInvalidTarget, Target: &target, Err: fmt.Errorf("%w flux/ns/app: %w", watcher.ErrInvalidTarget, err)})
	}
	conditions := func() map[string]map[string]any {
		require.NoError(t, s.writeFailure(context.Background(), s.failures.pending["ns/app"]))
		u, err := dyn.Resource(gitRepos).Namespace("ns").Get(context.Background(), "app", metav1.GetOptions{})
		require.NoError(t, err)
		gen, _, _ := unstructured.NestedFieldCopy(u.Object, "status", "observedGeneration")
		got := map[string]map[string]any{"": {"observedGeneration": gen}}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			got[c.(map[string]any)["type"].(string)] = c.(map[string]any)
		}
		return got
	}

	refuse(&payload.GitRepositoryError{Reason: "URLInvalid", Stalled: true, Err: errors.New("bad url")})
	got := conditions()
	for _, c := range []string{"Stalled", "FetchFailed"} {
		assert.Equal(t, "True", got[c]["status"], c)
		assert.Equal(t, "URLInvalid", got[c]["reason"], c)
		assert.Equal(t, "bad url", got[c]["message"], c)
	}
	assert.Equal(t, "False", got["Ready"]["status"])
	assert.Equal(t, "URLInvalid", got["Ready"]["reason"])
	assert.NotContains(t, got, "Reconciling", "stalled: not being retried")
	assert.Equal(t, repo.Generation, got[""]["observedGeneration"], "done with this generation")

	refuse(&payload.GitRepositoryError{Reason: "AuthenticationFailed", Err: errors.New("secret ns/creds not found")})
	got = conditions()
	assert.NotContains(t, got, "Stalled", "retried")
	assert.Equal(t, "ProgressingWithRetry", got["Reconciling"]["reason"])
	assert.Equal(t, "AuthenticationFailed", got["Ready"]["reason"])

	refuse(errors.New("not served")) // a source that says no reason
	got = conditions()
	assert.Equal(t, "GitOperationFailed", got["Ready"]["reason"])
	assert.Contains(t, got["Ready"]["message"], "not served")
	assert.NotContains(t, got, "Stalled")

	// Another source's refusal (no GitRepository in it) is not this sink's.
	other := watcher.NotWatched("flux/ns/app", errors.New("x"))
	s.failures.pending = nil
	s.Observe(watcher.Event{Type: watcher.EventInvalidTarget, Target: &other, Err: errors.New("x")})
	assert.Empty(t, s.failures.pending)
}

// The sink writes a target's latest failure, without the time of its next
// poll (which changes at every poll); a delivery drops it.
func TestTheLatestFailureOfATargetIsWritten(t *testing.T) {
	dyn, repo := fakeRepo(map[string]any{"branch": "main"})
	s, err := New(dyn, Config{Storage: t.TempDir(), Address: "h"})
	require.NoError(t, err)
	defer s.Close()
	target := &watcher.Target{ID: "flux/ns/app", Payload: repo}
	fail := func(msg string) {
		s.Observe(watcher.Event{Type: watcher.EventTargetFailed, Target: target, Err: &watcher.RetryError{Err: errors.New(msg), At: time.Now()}})
	}
	fail("first")
	fail("second")
	assert.Equal(t, "failed to checkout and determine revision: second", s.failures.pending["ns/app"].message)
	s.Observe(watcher.Event{Type: watcher.EventDelivered, Target: target})
	assert.Empty(t, s.failures.pending)
	s.Observe(watcher.Event{Type: watcher.EventPolled})                       // no target
	s.Observe(watcher.Event{Type: watcher.EventTargetFailed, Target: target}) // no error
	assert.Empty(t, s.failures.pending)

	fail("third")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool {
		u, err := dyn.Resource(gitRepos).Namespace("ns").Get(context.Background(), "app", metav1.GetOptions{})
		require.NoError(t, err)
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m := c.(map[string]any); m["type"] == "Ready" && m["message"] == "failed to checkout and determine revision: third" {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}
