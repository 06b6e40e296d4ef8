package apply

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modwatch/modwatch/gitutil"
)

// Action is what happened to one object.
type Action string

// The actions. In ModeDryRun and ModeDiff they say what would happen.
const (
	Created    Action = "created"
	Configured Action = "configured"
	Unchanged  Action = "unchanged"
	Deleted    Action = "deleted"
	// Skipped: an object to prune that another target applied (or no
	// one) is left in place.
	Skipped Action = "skipped"
	Failed  Action = "failed"
)

// SkipReason says why an object was Skipped.
type SkipReason string

// SkipNotIncluded: the object's kind is outside Config.Include, under
// IncludeSkip: the object was left alone (neither applied nor pruned).
const SkipNotIncluded SkipReason = "outside the included kinds"

// ObjectRef names an object.
type ObjectRef struct {
	Group, Version, Kind string
	Namespace, Name      string
}

// String is "Kind/namespace/name" or "Kind/name", with the group when it
// is not the core group ("Deployment.apps/ns/web").
func (r ObjectRef) String() string {
	k := r.Kind
	if r.Group != "" {
		k += "." + r.Group
	}
	if r.Namespace == "" {
		return k + "/" + r.Name
	}
	return k + "/" + r.Namespace + "/" + r.Name
}

// GroupKind returns the object's group and kind.
func (r ObjectRef) GroupKind() schema.GroupKind {
	return schema.GroupKind{Group: r.Group, Kind: r.Kind}
}

func refOf(u *unstructured.Unstructured) ObjectRef {
	gvk := u.GroupVersionKind()
	return ObjectRef{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()}
}

// key identifies an object regardless of its version.
func (r ObjectRef) key() string {
	return r.Namespace + "_" + r.Name + "_" + r.Group + "_" + r.Kind
}

// Entry is the outcome for one object.
type Entry struct {
	Object ObjectRef
	Action Action
	// Err says why the object failed.
	Err error
	// Reason says why a Skipped object was: SkipNotIncluded, or "" for an
	// object to prune that another target applied, or no one.
	Reason SkipReason
	// Live and Merged are the object in the cluster and as the apply would
	// leave it, for objects that would be configured in ModeDiff.
	Live, Merged *unstructured.Unstructured
}

// Result is what one delivery did.
type Result struct {
	// Target is the target ID.
	Target string
	// Commit is the commit rendered.
	Commit gitutil.Hash
	// Mode is the sink's mode: in ModeDryRun and ModeDiff nothing was
	// written.
	Mode Mode
	// Entries has one entry per object applied or pruned, in apply order
	// then prune order, after those left alone for their kind
	// (SkipNotIncluded).
	Entries []Entry
	// Read are the repository paths outside the target's path that the
	// render read (a kustomize overlay's bases; see RepoRenderer).
	Read []string
}

// Reads implements watcher.Dependent: a commit that changes what the
// render read is delivered.
func (r *Result) Reads() []string { return r.Read }

// Count returns how many entries have action a.
func (r *Result) Count(a Action) int {
	n := 0
	for _, e := range r.Entries {
		if e.Action == a {
			n++
		}
	}
	return n
}

// Find returns the entry of the object named by ref.String(), if any.
func (r *Result) Find(ref string) (Entry, bool) {
	for _, e := range r.Entries {
		if e.Object.String() == ref {
			return e, true
		}
	}
	return Entry{}, false
}

// SkippedFor returns the objects Skipped for reason.
func (r *Result) SkippedFor(reason SkipReason) []ObjectRef {
	var out []ObjectRef
	for _, e := range r.Entries {
		if e.Action == Skipped && e.Reason == reason {
			out = append(out, e.Object)
		}
	}
	return out
}

// skipNotIncluded adds ref as Skipped for SkipNotIncluded, unless it is
// there already.
func (r *Result) skipNotIncluded(ref ObjectRef) {
	for _, e := range r.Entries {
		if e.Reason == SkipNotIncluded && e.Object.key() == ref.key() {
			return
		}
	}
	r.Entries = append(r.Entries, Entry{Object: ref, Action: Skipped, Reason: SkipNotIncluded})
}

// String summarises the result: "2 created, 1 configured, 40 unchanged",
// then the objects left alone for their kind: "1 created, 1 skipped; 1
// outside the included kinds, left alone: Service/ns/web".
func (r *Result) String() string {
	var parts []string
	for _, a := range []Action{Created, Configured, Unchanged, Deleted, Skipped, Failed} {
		if n := r.Count(a); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, a))
		}
	}
	if len(parts) == 0 {
		return "no objects"
	}
	s := strings.Join(parts, ", ")
	if r.Mode != ModeApply && r.Mode != "" {
		s += " (" + string(r.Mode) + ")"
	}
	if out := r.SkippedFor(SkipNotIncluded); len(out) > 0 {
		names := make([]string, 0, 6)
		for _, ref := range out[:min(len(out), 5)] {
			names = append(names, ref.String())
		}
		if len(out) > 5 {
			names = append(names, fmt.Sprintf("and %d more", len(out)-5))
		}
		s += fmt.Sprintf("; %d %s, left alone: %s", len(out), SkipNotIncluded, strings.Join(names, ", "))
	}
	return s
}

// err summarises the failed entries, nil when there are none.
func (r *Result) err() error {
	var failed []string
	var first error
	for _, e := range r.Entries {
		if e.Action == Failed {
			if first == nil {
				first = e.Err
			}
			failed = append(failed, e.Object.String())
		}
	}
	if len(failed) == 0 {
		return nil
	}
	if len(failed) > 5 {
		failed = append(failed[:5], fmt.Sprintf("and %d more", len(failed)-5))
	}
	return fmt.Errorf("apply: target %s: %d objects failed (%s): %w", r.Target, r.Count(Failed), strings.Join(failed, ", "), first)
}
