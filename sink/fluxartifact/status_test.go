package fluxartifact

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/watcher"
)

// A stored artifact writes the artifact, Ready and ArtifactInStorage
// (their transition kept when they were true), ends a failure's
// conditions and a verification's, and records the spec it observed.
func TestAStoredArtifactsStatus(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"generation": int64(3)},
		"spec":     map[string]any{"ignore": "/*\n!/deploy\n", "sparseCheckout": []any{"deploy"}},
		"status": map[string]any{
			"observedInclude": []any{map[string]any{"repository": map[string]any{"name": "gone"}}},
			"conditions": []any{
				map[string]any{"type": "Ready", "status": "True", "reason": "Succeeded", "lastTransitionTime": "2026-01-01T00:00:00Z"},
				map[string]any{"type": "Stalled", "status": "True", "reason": "InvalidURL"},
				map[string]any{"type": "FetchFailed", "status": "True", "reason": "GitOperationFailed"},
				map[string]any{"type": "SourceVerified", "status": "True", "reason": "Succeeded"},
			},
		},
	}}
	now := metav1.NewTime(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	setStatus(u, statusOf(artifact{Path: "gitrepository/ns/app/c.tar.gz", Digest: "sha256:00", Size: 42}, "http://h/gitrepository/ns/app/c.tar.gz", "main@sha1:c", now))

	art, _, _ := unstructured.NestedMap(u.Object, "status", "artifact")
	assert.Equal(t, map[string]any{"path": "gitrepository/ns/app/c.tar.gz", "url": "http://h/gitrepository/ns/app/c.tar.gz",
		"revision": "main@sha1:c", "digest": "sha256:00", "size": int64(42), "lastUpdateTime": "2026-12-05T12:00:00Z"}, art)
	gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	assert.Equal(t, int64(3), gen)
	ignore, _, _ := unstructured.NestedString(u.Object, "status", "observedIgnore")
	assert.Equal(t, "/*\n!/deploy\n", ignore)
	sparse, _, _ := unstructured.NestedStringSlice(u.Object, "status", "observedSparseCheckout")
	assert.Equal(t, []string{"deploy"}, sparse)
	_, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "observedInclude")
	assert.False(t, ok, "an include no longer in the spec is no longer observed")

	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	byType := map[string]map[string]any{}
	var order []string
	for _, c := range conds {
		m := c.(map[string]any)
		byType[m["type"].(string)] = m
		order = append(order, m["type"].(string))
	}
	assert.Equal(t, []string{"Ready", "ArtifactInStorage"}, order, "no verification: SourceVerified goes, as source-controller has it")
	for _, ty := range []string{"Ready", "ArtifactInStorage"} {
		assert.Equal(t, "True", byType[ty]["status"])
		assert.Equal(t, "Succeeded", byType[ty]["reason"])
		assert.Equal(t, "stored artifact for revision 'main@sha1:c'", byType[ty]["message"])
		assert.Equal(t, int64(3), byType[ty]["observedGeneration"])
	}
	assert.Equal(t, "2026-01-01T00:00:00Z", byType["Ready"]["lastTransitionTime"], "true already: its transition kept")
	assert.Equal(t, "2026-12-05T12:00:00Z", byType["ArtifactInStorage"]["lastTransitionTime"])
}

// A verified artifact says which signatures were checked, by whose keys,
// in SourceVerified, and the mode in sourceVerificationMode, as
// source-controller writes them; a later one without verification
// drops both.
func TestAVerifiedArtifactSaysWhoSigned(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"generation": int64(1)},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "SourceVerified", "status": "False", "reason": "InvalidCommitSignature"}}}}}
	now := metav1.NewTime(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	st := statusOf(artifact{Path: "p", Digest: "sha256:00"}, "http://h/p", "v1.0.0@sha1:c", now)
	st.verify = &watcher.Verify{Mode: watcher.VerifyTagAndHEAD}
	st.verified = []watcher.Signature{{Kind: "tag", Name: "v1.0.0", Signer: "Flux"}, {Kind: "commit", Name: "c", Signer: "SHA256:abc"}}
	setStatus(u, st)
	c := conditionIn(u, "SourceVerified")
	assert.Equal(t, "True", c["status"])
	assert.Equal(t, "Succeeded", c["reason"])
	assert.Equal(t, "verified signature of\n\t- tag 'v1.0.0' with key 'Flux'\n\t- commit 'c' with key 'SHA256:abc'", c["message"])
	assert.Equal(t, "2026-12-05T12:00:00Z", c["lastTransitionTime"])
	mode, _, _ := unstructured.NestedString(u.Object, "status", "sourceVerificationMode")
	assert.Equal(t, "TagAndHEAD", mode)

	st.verify = &watcher.Verify{} // HEAD, Flux's default
	setStatus(u, st)
	mode, _, _ = unstructured.NestedString(u.Object, "status", "sourceVerificationMode")
	assert.Equal(t, "HEAD", mode)

	st.verify, st.verified = nil, nil
	setStatus(u, st)
	assert.Nil(t, conditionIn(u, "SourceVerified"))
	_, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "sourceVerificationMode")
	assert.False(t, ok)
}

// conditionIn is u's condition of type t, or nil.
func conditionIn(u *unstructured.Unstructured, t string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == t {
			return m
		}
	}
	return nil
}

// The same artifact delivered again (a reconcile request, a new
// generation with the same tree) keeps its lastUpdateTime, as
// source-controller's does; another one takes the delivery's. A request
// is acknowledged once, a failure's write included.
func TestTheSameArtifactKeepsItsTimeAndARequestIsAcknowledged(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"generation": int64(1)}}}
	a := artifact{Path: "gitrepository/ns/app/c.tar.gz", Digest: "sha256:00", Size: 42}
	url := "http://h/gitrepository/ns/app/c.tar.gz"
	at := func(h int) metav1.Time { return metav1.NewTime(time.Date(2026, 12, 5, h, 0, 0, 0, time.UTC)) }
	updated := func() any {
		v, _, _ := unstructured.NestedFieldCopy(u.Object, "status", "artifact", "lastUpdateTime")
		return v
	}
	handledAt := func() any {
		v, _, _ := unstructured.NestedFieldCopy(u.Object, "status", "lastHandledReconcileAt")
		return v
	}

	setStatus(u, statusOf(a, url, "main@sha1:c", at(1)))
	assert.Equal(t, "2026-12-05T01:00:00Z", updated())
	assert.Nil(t, handledAt(), "no request, none acknowledged")

	u.SetAnnotations(map[string]string{requestedAt: "req-1"})
	st := statusOf(a, url, "main@sha1:c", at(2))
	st.requested = "req-1"
	setStatus(u, st)
	assert.Equal(t, "2026-12-05T01:00:00Z", updated(), "the same artifact: its time kept")
	assert.Equal(t, "req-1", handledAt())

	b := a
	b.Digest = "sha256:01"
	setStatus(u, statusOf(b, url, "main@sha1:c", at(3)))
	assert.Equal(t, "2026-12-05T03:00:00Z", updated(), "another digest: another artifact")
	assert.Equal(t, "req-1", handledAt(), "no request: the last acknowledged stays")
	setStatus(u, statusOf(b, url, "main@sha1:d", at(4)))
	assert.Equal(t, "2026-12-05T04:00:00Z", updated(), "another revision")

	assert.False(t, handled(u, ""), "no request")
	assert.False(t, handled(u, "req-1"), "acknowledged already")
	assert.False(t, handled(u, "req-2"), "not the request the object carries")
	u.SetAnnotations(map[string]string{requestedAt: "req-2"})
	assert.True(t, handled(u, "req-2"))
	assert.Equal(t, "req-2", handledAt())
	assert.False(t, handled(u, "req-1"), "an earlier request, written late: never back")
	assert.Equal(t, "req-2", handledAt())
}
