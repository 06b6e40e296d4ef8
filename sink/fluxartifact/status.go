package fluxartifact

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Flux's condition types and reasons a stored artifact sets or clears
// (fluxcd/pkg/apis/meta, source-controller's api/v1).
const (
	condReady             = "Ready"
	condArtifactInStorage = "ArtifactInStorage"
	reasonSucceeded       = "Succeeded"
)

// requestedAt is Flux's reconcile request annotation.
const requestedAt = "reconcile.fluxcd.io/requestedAt"

// cleared are the conditions of a failed or unfinished reconciliation,
// which a stored artifact ends.
var cleared = []string{"Reconciling", "Stalled", "FetchFailed", "StorageOperationFailed", "ArtifactOutdated", "IncludeUnavailable"}

// status is what a stored artifact writes.
type status struct {
	artifact map[string]any
	message  string
	now      metav1.Time
	// requested is the reconcile request the delivery answers (the
	// target's payload.GitRepository.RequestedAt), or "".
	requested string
	// verify is the target's, and verified the signatures checked.
	verify   *watcher.Verify
	verified []watcher.Signature
	// included are the artifacts of the includes put in, in order.
	included []payload.Artifact
}

func statusOf(a artifact, url, rev string, now metav1.Time) status {
	return status{
		artifact: map[string]any{
			"path": a.Path, "url": url, "revision": rev, "digest": a.Digest,
			"size": a.Size, "lastUpdateTime": now.UTC().Format("2006-01-02T15:04:05Z"),
		},
		message: fmt.Sprintf("stored artifact for revision '%s'", rev),
		now:     now,
	}
}

// setStatus writes st into u's status: the artifact, Ready and
// ArtifactInStorage true, the conditions of a failure cleared, the
// generation and the spec fields the artifact observed.
func setStatus(u *unstructured.Unstructured, st status) {
	gen := u.GetGeneration()
	if old, ok, _ := unstructured.NestedMap(u.Object, "status", "artifact"); ok && old["revision"] == st.artifact["revision"] &&
		old["digest"] == st.artifact["digest"] && old["url"] == st.artifact["url"] && old["lastUpdateTime"] != nil {
		st.artifact["lastUpdateTime"] = old["lastUpdateTime"] // the same artifact, delivered again
	}
	_ = unstructured.SetNestedField(u.Object, st.artifact, "status", "artifact")
	handled(u, st.requested)
	_ = unstructured.SetNestedField(u.Object, gen, "status", "observedGeneration")
	setIncluded(u, st.included)
	for field, observed := range map[string]string{
		"ignore": "observedIgnore", "recurseSubmodules": "observedRecurseSubmodules",
		"include": "observedInclude", "sparseCheckout": "observedSparseCheckout",
	} {
		if v, ok, _ := unstructured.NestedFieldCopy(u.Object, "spec", field); ok {
			_ = unstructured.SetNestedField(u.Object, v, "status", observed)
		} else {
			unstructured.RemoveNestedField(u.Object, "status", observed)
		}
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	out := setVerified(u, readyConditions(conds, gen, st), conds, gen, st)
	_ = unstructured.SetNestedSlice(u.Object, out, "status", "conditions")
}

// readyConditions are conds with Ready and ArtifactInStorage true, saying
// st's message, and the conditions of a failure cleared.
func readyConditions(conds []any, gen int64, st status) []any {
	var out []any
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		switch t, _ := m["type"].(string); {
		case t == condReady || t == condArtifactInStorage:
		case slices.Contains(cleared, t):
		default:
			out = append(out, m)
		}
	}
	for _, t := range []string{condReady, condArtifactInStorage} {
		out = append(out, condition(conds, t, gen, st))
	}
	return out
}

// restore ends the failure u's status shows when its artifact is this
// sink's (its URL begins with prefix) and of commit, which the sink has
// (watcher.EventUpToDate): the target is at the commit it was served at
// again, and nothing new is delivered. A verification that failed is no
// longer said (its next delivery says who signed); a request is
// acknowledged. False when there is nothing to write.
func restore(u *unstructured.Unstructured, prefix string, commit gitutil.Hash, requested string, now metav1.Time) bool {
	art, ok, _ := unstructured.NestedMap(u.Object, "status", "artifact")
	rev, _ := art["revision"].(string)
	if url, _ := art["url"].(string); !ok || !strings.HasPrefix(url, prefix) || commit.IsZero() ||
		rev != "sha1:"+commit.String() && !strings.HasSuffix(rev, "@sha1:"+commit.String()) {
		return false // no artifact of this sink's, of that commit, to be Ready with
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	failing := false
	for _, c := range conds {
		m, _ := c.(map[string]any)
		t, _ := m["type"].(string)
		failing = failing || slices.Contains(cleared, t) || t == condReady && m["status"] != "True" ||
			t == condSourceVerified && m["status"] == "False"
	}
	if !failing {
		return handled(u, requested)
	}
	gen := u.GetGeneration()
	st := status{message: fmt.Sprintf("stored artifact for revision '%s'", rev), now: now}
	out := slices.DeleteFunc(readyConditions(conds, gen, st), func(c any) bool {
		m, _ := c.(map[string]any)
		return m["type"] == condSourceVerified && m["status"] == "False"
	})
	_ = unstructured.SetNestedSlice(u.Object, out, "status", "conditions")
	handled(u, requested)
	return true
}

// setVerified sets what source-controller writes of a verification: the
// mode verified (status.sourceVerificationMode) and SourceVerified true,
// saying which signatures by which keys, in out; or neither, for a
// target without one.
func setVerified(u *unstructured.Unstructured, out, conds []any, gen int64, st status) []any {
	out = slices.DeleteFunc(out, func(c any) bool { m, _ := c.(map[string]any); return m["type"] == condSourceVerified })
	if st.verify == nil {
		unstructured.RemoveNestedField(u.Object, "status", "sourceVerificationMode")
		return out
	}
	mode := cmp.Or(string(st.verify.Mode), string(watcher.VerifyHEAD))
	_ = unstructured.SetNestedField(u.Object, mode, "status", "sourceVerificationMode")
	var msg strings.Builder
	msg.WriteString("verified signature of")
	for _, sig := range st.verified {
		fmt.Fprintf(&msg, "\n\t- %s '%s' with key '%s'", sig.Kind, sig.Name, sig.Signer)
	}
	c := condition(conds, condSourceVerified, gen, status{message: msg.String(), now: st.now})
	return append(out, c)
}

// condition is the condition t true with st's message, its transition
// time kept when it was true already.
func condition(conds []any, t string, gen int64, st status) map[string]any {
	since := st.now.UTC().Format("2006-01-02T15:04:05Z")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == t && m["status"] == "True" {
			if at, ok := m["lastTransitionTime"].(string); ok {
				since = at
			}
		}
	}
	return map[string]any{
		"type": t, "status": "True", "reason": reasonSucceeded, "message": st.message,
		"observedGeneration": gen, "lastTransitionTime": since,
	}
}

// handled acknowledges a reconcile request in u's status
// (lastHandledReconcileAt, which `flux reconcile` waits for); "" is none.
// Only the request the object carries now is acknowledged: a write made
// for an earlier one (a failure observed before a later request was
// delivered) never moves the acknowledgement back.
func handled(u *unstructured.Unstructured, requested string) bool {
	if requested == "" || u.GetAnnotations()[requestedAt] != requested {
		return false
	}
	if old, _, _ := unstructured.NestedString(u.Object, "status", "lastHandledReconcileAt"); old == requested {
		return false
	}
	_ = unstructured.SetNestedField(u.Object, requested, "status", "lastHandledReconcileAt")
	return true
}

// setIncluded writes the artifacts included (status.includedArtifacts,
// as source-controller has them), or removes them when there are none.
func setIncluded(u *unstructured.Unstructured, included []payload.Artifact) {
	if len(included) == 0 {
		unstructured.RemoveNestedField(u.Object, "status", "includedArtifacts")
		return
	}
	list := make([]any, 0, len(included))
	for _, a := range included {
		m := map[string]any{"path": a.Path, "url": a.URL, "revision": a.Revision, "lastUpdateTime": a.LastUpdateTime}
		if a.Digest != "" {
			m["digest"] = a.Digest
		}
		if a.Size != 0 {
			m["size"] = a.Size
		}
		list = append(list, m)
	}
	_ = unstructured.SetNestedSlice(u.Object, list, "status", "includedArtifacts")
}
