package fluxartifact

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// condsOf is u's conditions, by type, as "status reason".
func condsOf(u *unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m := c.(map[string]any)
		out[m["type"].(string)] = fmt.Sprint(m["status"], " ", m["reason"])
	}
	return out
}

// A failed verification is not a failed fetch, and the other way round,
// as source-controller has them: one ends the other.
func TestAFetchFailureAndAVerificationFailureEndEachOther(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"generation": int64(1)}}}
	now := metav1.Now()
	setFailure(u, failure{message: "secret ns/creds not found", reason: "AuthenticationFailed"}, now)
	setFailure(u, failure{message: "public keys secret error: not found", reason: "VerificationError", refused: true}, now)
	got := condsOf(u)
	assert.Equal(t, "False VerificationError", got["SourceVerified"])
	assert.NotContains(t, got, "FetchFailed", "the fetch did not fail")

	setFailure(u, failure{message: "list refs: 503", reason: "GitOperationFailed"}, now)
	got = condsOf(u)
	assert.NotContains(t, got, "SourceVerified", "a failed verification ends with the next fetch")
	assert.Equal(t, "True GitOperationFailed", got["FetchFailed"])

	u.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "SourceVerified", "status": "True", "reason": "Succeeded"}}}
	setFailure(u, failure{message: "list refs: 503", reason: "GitOperationFailed"}, now)
	assert.Equal(t, "True Succeeded", condsOf(u)["SourceVerified"], "the last verification stays through a failed fetch")
}

// A commit whose signature does not verify fails its verification, with
// Flux's reason, not its fetch; what the last delivery verified is no
// longer said.
func TestAnUnverifiedCommitFailsTheVerification(t *testing.T) {
	for _, tc := range []struct{ err, reason string }{
		{"commit 1234 is not signed", "InvalidCommitSignature"},
		{"tag v1.0.0 5678 is not signed", "InvalidTagSignature"},
		{"refs/tags/v1.0.0 is not an annotated tag", "InvalidGitObject"},
	} {
		dyn, repo := fakeRepo(map[string]any{"branch": "main"})
		s, err := New(dyn, Config{Storage: t.TempDir(), Address: "h"})
		require.NoError(t, err)
		res := dyn.Resource(gitRepos).Namespace("ns")
		u, err := res.Get(context.Background(), "app", metav1.GetOptions{})
		require.NoError(t, err)
		u.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "SourceVerified", "status": "True", "reason": "Succeeded"}}}
		_, err = res.UpdateStatus(context.Background(), u, metav1.UpdateOptions{})
		require.NoError(t, err)
		target := &watcher.Target{ID: "flux/ns/app", Payload: repo, Verify: &watcher.Verify{}}
		s.Observe(watcher.Event{Type: watcher.EventTargetFailed, Target: target, Err: &watcher.RetryError{Err: fmt.Errorf("%w: %s", mirror.ErrUnverified, tc.err)}})
		require.NoError(t, s.writeFailure(context.Background(), s.failures.pending["ns/app"]))
		u, err = res.Get(context.Background(), "app", metav1.GetOptions{})
		require.NoError(t, err)
		got := condsOf(u)
		assert.Equal(t, "False "+tc.reason, got["SourceVerified"], tc.err)
		assert.Equal(t, "False "+tc.reason, got["Ready"], tc.err)
		assert.NotContains(t, got, "FetchFailed", tc.err)
		require.NoError(t, s.Close())
	}
}

// A failure observed before a delivery began is not written after it:
// the artifact delivered stays Ready. One observed while the delivery
// was packing is newer than what it wrote, and is written.
func TestAFailureOlderThanADeliveryIsNotWritten(t *testing.T) {
	dyn, repo := fakeRepo(map[string]any{"branch": "main"})
	s, err := New(dyn, Config{Storage: t.TempDir(), Address: "h"})
	require.NoError(t, err)
	defer s.Close()
	why := &payload.GitRepositoryError{Reason: "AuthenticationFailed", Err: errors.New("flux: secret ns/creds not found")}
	refused := watcher.Refused(watcher.Target{ID: "flux/ns/app", Payload: repo}, why)
	s.Observe(watcher.Event{Type: watcher.EventInvalidTarget, Target: &refused, Err: fmt.Errorf("%w flux/ns/app: %w", watcher.ErrInvalidTarget, why)})
	stale := s.failures.pending["ns/app"]

	target := watcher.Target{ID: "flux/ns/app", Payload: repo} // the Secret is back
	require.NoError(t, s.Deliver(context.Background(), watcher.Change{Target: target, Ref: "refs/heads/main", To: gitutil.Hash{1}, FS: fstest.MapFS{"f": {Data: []byte("x")}}}))
	require.NoError(t, s.writeFailure(context.Background(), stale))
	u, err := dyn.Resource(gitRepos).Namespace("ns").Get(context.Background(), "app", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "True Succeeded", condsOf(u)["Ready"], "delivered after the refusal was observed")

	s.Observe(watcher.Event{Type: watcher.EventInvalidTarget, Target: &refused, Err: why, Time: time.Now().Add(time.Second)}) // refused again, after
	require.NoError(t, s.writeFailure(context.Background(), s.failures.pending["ns/app"]))
	u, err = dyn.Resource(gitRepos).Namespace("ns").Get(context.Background(), "app", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "False AuthenticationFailed", condsOf(u)["Ready"], "a refusal after the delivery is written")
}

// What is kept of the refusals written is bounded: a tenant that makes
// and deletes refused GitRepositories (of which nothing is reported once
// gone) does not grow it past maxWritten.
func TestTheRefusalsKeptAreBounded(t *testing.T) {
	dyn, repo := fakeRepo(map[string]any{"branch": "main"})
	s, err := New(dyn, Config{Storage: t.TempDir(), Address: "h"})
	require.NoError(t, err)
	defer s.Close()
	s.failures.written = map[string]uint64{}
	for i := range maxWritten {
		s.failures.written[fmt.Sprintf("ns/gone-%d", i)] = 1
	}
	why := &payload.GitRepositoryError{Reason: "URLInvalid", Stalled: true, Err: errors.New("bad url")}
	refused := watcher.Refused(watcher.Target{ID: "flux/ns/app", Payload: repo}, why)
	s.Observe(watcher.Event{Type: watcher.EventInvalidTarget, Target: &refused, Err: why})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool {
		s.failures.mu.Lock()
		defer s.failures.mu.Unlock()
		_, ok := s.failures.written["ns/app"]
		return ok
	}, 10*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	assert.Len(t, s.failures.written, 1, "started again at the bound")
}

// The news that a target is at its commit, from a poll earlier than its
// latest failure (a deliverer reports it late), does not end the failure;
// a later poll's does.
func TestLateNewsOfARecoveryDoesNotEndALaterFailure(t *testing.T) {
	dyn, repo := fakeRepo(map[string]any{"branch": "main"})
	s, err := New(dyn, Config{Storage: t.TempDir(), Address: "h"})
	require.NoError(t, err)
	defer s.Close()
	target := &watcher.Target{ID: "flux/ns/app", Payload: repo}
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	s.Observe(watcher.Event{Type: watcher.EventTargetFailed, Target: target, Err: errors.New("503"), Time: t0.Add(time.Second)})
	s.Observe(watcher.Event{Type: watcher.EventUpToDate, Target: target, Seen: t0, Time: t0.Add(2 * time.Second)})
	assert.False(t, s.failures.pending["ns/app"].recovered, "the failure stays")
	s.Observe(watcher.Event{Type: watcher.EventUpToDate, Target: target, Seen: t0.Add(3 * time.Second), Time: t0.Add(3 * time.Second)})
	assert.True(t, s.failures.pending["ns/app"].recovered, "a later poll's news ends it")
}

// A recovery makes the GitRepository Ready again only when its artifact
// is of the commit the sink has (EventUpToDate's): not from another
// commit's news, nor for an artifact that is not the sink's.
func TestARecoveryIsOfTheArtifactsCommit(t *testing.T) {
	failing := func(url, rev string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"generation": int64(1)}, "status": map[string]any{
			"artifact":   map[string]any{"url": url, "revision": rev},
			"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "GitOperationFailed"}, map[string]any{"type": "FetchFailed", "status": "True"}},
		}}}
	}
	c1, c2 := gitutil.Hash{1}, gitutil.Hash{2}
	now := metav1.Now()
	u := failing("http://h/gitrepository/ns/app/x.tar.gz", "main@sha1:"+c1.String())
	assert.False(t, restore(u, "http://h/", c2, "", now), "another commit")
	assert.False(t, restore(u, "http://other/", c1, "", now), "not this sink's artifact")
	assert.False(t, restore(u, "http://h/", gitutil.Hash{}, "", now), "no commit")
	require.True(t, restore(u, "http://h/", c1, "", now))
	got := condsOf(u)
	assert.Equal(t, "True Succeeded", got["Ready"])
	assert.NotContains(t, got, "FetchFailed")
	u = failing("http://h/p", "sha1:"+c1.String()) // a commit alone
	assert.True(t, restore(u, "http://h/", c1, "", now))
}

// A recovery whose write fails is tried again later: no other event
// would say it.
func TestARecoveryThatFailsToBeWrittenIsTriedAgain(t *testing.T) {
	dyn, repo := fakeRepo(map[string]any{"branch": "main"})
	s, err := New(dyn, Config{Storage: t.TempDir(), Address: "h"})
	require.NoError(t, err)
	defer s.Close()
	fl := failure{repo: repo, recovered: true, commit: gitutil.Hash{1}, at: time.Now()}
	s.failures.wrote("ns/app", fl, errors.New("apiserver: 500"))
	require.Eventually(t, func() bool {
		s.failures.mu.Lock()
		defer s.failures.mu.Unlock()
		p, ok := s.failures.pending["ns/app"]
		return ok && p.recovered && p.tries == 1
	}, 10*time.Second, 10*time.Millisecond, "queued again")
}

// A write that waits for the object's turn gives up when its ctx ends:
// a delivery never waits past its deadline behind a stuck write.
func TestAWriteWaitsForItsTurnNoLongerThanItsContext(t *testing.T) {
	var k keyedMutex
	unlock := k.lock("ns/app")
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := k.lockCtx(ctx, "ns/app")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	other, err := k.lockCtx(context.Background(), "ns/other")
	require.NoError(t, err, "another object's turn is its own")
	other()
}
