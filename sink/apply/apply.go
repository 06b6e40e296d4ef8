package apply

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa"
	ssautils "github.com/fluxcd/pkg/ssa/utils"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// waitInterval is how often cluster definitions are polled until ready.
const waitInterval = 500 * time.Millisecond

// prepare gives namespaced objects without a namespace rs.Namespace,
// takes the namespace off cluster-scoped ones, marks every object as tr
// says and refuses duplicates. The scope of a kind the cluster does not
// know yet comes from a CustomResourceDefinition among objs. An object
// outside Config.Include fails the delivery, or under IncludeSkip is left
// out of those returned, Skipped in res.
func (s *Sink) prepare(objs []*unstructured.Unstructured, rs payload.Render, tr tracking, res *Result) ([]*unstructured.Unstructured, error) {
	crdScopes := map[schema.GroupKind]bool{}
	for _, o := range objs {
		if ssautils.IsCRD(o) {
			group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
			crdScopes[schema.GroupKind{Group: group, Kind: kind}] = scope == "Namespaced"
		}
	}
	seen := make(map[string]bool, len(objs))
	kept := make([]*unstructured.Unstructured, 0, len(objs))
	var skipped []ObjectRef
	for _, o := range objs {
		if inc := s.cfg.Include; inc != nil && !inc(o.GroupVersionKind().GroupKind()) {
			if s.cfg.IncludeMode != IncludeSkip {
				return nil, watcher.Permanent(fmt.Errorf("apply: %s: its kind is not among the kinds this sink may apply (includedResources): nothing applied", refOf(o)))
			}
			// Named where it would go; one of a kind the cluster does not
			// know, as its manifest names it.
			if err := s.place(o, rs, crdScopes); err != nil && !meta.IsNoMatchError(err) {
				return nil, err
			}
			skipped = append(skipped, refOf(o))
			continue
		}
		if err := s.place(o, rs, crdScopes); err != nil {
			return nil, err
		}
		tr.mark(o)
		k := refOf(o).key()
		if seen[k] {
			return nil, watcher.Permanent(fmt.Errorf("apply: %s is rendered twice", refOf(o)))
		}
		seen[k] = true
		kept = append(kept, o)
	}
	for _, r := range skipped {
		res.skipNotIncluded(r)
	}
	return kept, nil
}

// place gives o its namespace, as prepare says.
func (s *Sink) place(o *unstructured.Unstructured, rs payload.Render, crdScopes map[schema.GroupKind]bool) error {
	namespaced, err := s.client.IsObjectNamespaced(o)
	if err != nil {
		scoped, ok := crdScopes[o.GroupVersionKind().GroupKind()]
		if !meta.IsNoMatchError(err) || !ok {
			return fmt.Errorf("apply: %s: %w", refOf(o), err)
		}
		namespaced = scoped
	}
	switch {
	case !namespaced:
		o.SetNamespace("")
	case o.GetNamespace() == "" || (s.cfg.ForceNamespace && rs.Namespace != ""):
		o.SetNamespace(rs.Namespace)
	}
	return nil
}

// notIn returns the refs whose key m does not hold.
func notIn[V any](refs []ObjectRef, m map[string]V) []ObjectRef {
	var out []ObjectRef
	for _, r := range refs {
		if _, ok := m[r.key()]; !ok {
			out = append(out, r)
		}
	}
	return out
}

// managed splits refs into those the sink manages and those it leaves
// alone (outside Config.Include, under IncludeSkip), each of which it
// adds to res as Skipped.
func (s *Sink) managed(refs []ObjectRef, res *Result) (managed, outside []ObjectRef) {
	for _, r := range refs {
		if s.cfg.outside(r.GroupKind()) {
			outside = append(outside, r)
			res.skipNotIncluded(r)
			continue
		}
		managed = append(managed, r)
	}
	return managed, outside
}

// apply applies objs in two stages, then prunes and records the inventory.
// On a new commit, unless Config.AlwaysCheckDrift, an object whose digest
// is the one the inventory recorded is not looked at: drift is corrected by
// resyncs.
func (s *Sink) apply(ctx context.Context, objs []*unstructured.Unstructured, reason watcher.Reason, old *inventory, res *Result) error {
	oldRefs, err := old.refs()
	if err != nil {
		return err
	}
	was := old.entries()
	onlyChanged := !s.cfg.AlwaysCheckDrift && (reason == watcher.ReasonNewCommit || reason == watcher.ReasonForcePush)
	defs, rest, digests := s.sort(ctx, objs, was, onlyChanged, res)
	// applied records the objects this delivery did not fail on.
	applied := func(inv entries) entries {
		for _, e := range res.Entries {
			if d, ok := digests[e.Object.key()]; ok && e.Action != Failed {
				inv.add(e.Object, d)
			}
		}
		return inv
	}
	// Until a delivery succeeds, the inventory holds what it held and what
	// the delivery applied, so that nothing applied is orphaned.
	partial := func(cause error) error {
		if err := s.writeInventory(ctx, old, applied(old.entries()).inventory(res.Target)); err != nil {
			return errors.Join(cause, err)
		}
		return cause
	}

	s.applyStage(ctx, defs, res)
	if err := res.err(); err != nil {
		return partial(err)
	}
	if err := s.waitReady(ctx, res); err != nil {
		return partial(err)
	}
	s.applyStage(ctx, rest, res)
	if err := res.err(); err != nil {
		return partial(err)
	}

	inv := applied(entries{})
	// What is left alone for its kind stays recorded, untouched.
	stale, outside := s.managed(notIn(oldRefs, digests), res)
	for _, r := range outside {
		inv[r.key()] = was[r.key()]
	}
	if !s.cfg.DisablePrune {
		for _, r := range s.prune(ctx, stale, s.ownerOf(old), res) {
			inv[r.key()] = was[r.key()]
		}
	}
	if err := s.writeInventory(ctx, old, inv.inventory(res.Target)); err != nil {
		return err
	}
	return res.err()
}

// AnnotationCreateOnly, set to "true" by a renderer on an object, makes
// the sink create the object when it is absent and never change it after
// (Helm's way with a chart's crds/; see helm.CRDsCreate). The sink removes
// the annotation before applying: it never reaches the cluster.
const AnnotationCreateOnly = "apply.modwatch.io/create-only"

// createOnly removes AnnotationCreateOnly from o and reports whether it
// was set.
func createOnly(o *unstructured.Unstructured) bool {
	a := o.GetAnnotations()
	v, ok := a[AnnotationCreateOnly]
	if !ok {
		return false
	}
	delete(a, AnnotationCreateOnly)
	if len(a) == 0 {
		a = nil
	}
	o.SetAnnotations(a)
	return v == "true"
}

// exists reports whether the cluster has o.
func (s *Sink) exists(ctx context.Context, o *unstructured.Unstructured) (bool, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(o.GroupVersionKind())
	err := s.client.Get(ctx, client.ObjectKeyFromObject(o), live)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("apply: %s: %w", refOf(o), err)
	}
	return true, nil
}

// sort sorts objs into the cluster definitions and the rest to apply,
// with each one's digest; those with nothing to do (unchanged since the
// inventory's digest, when onlyChanged; create-only and there already)
// get their entry in res now.
func (s *Sink) sort(ctx context.Context, objs []*unstructured.Unstructured, was entries, onlyChanged bool, res *Result) (defs, rest []*unstructured.Unstructured, digests map[string]string) {
	digests = make(map[string]string, len(objs))
	for _, o := range objs {
		once := createOnly(o)
		r := refOf(o)
		d := digest(o)
		digests[r.key()] = d
		if once {
			exists, err := s.exists(ctx, o)
			if err != nil {
				res.Entries = append(res.Entries, Entry{Object: r, Action: Failed, Err: err})
				continue
			}
			if exists {
				res.Entries = append(res.Entries, Entry{Object: r, Action: Unchanged}) // created once, never changed
				continue
			}
		}
		switch e, ok := was[r.key()]; {
		case onlyChanged && ok && d != "" && e.D == d && e.V == r.Version:
			res.Entries = append(res.Entries, Entry{Object: r, Action: Unchanged})
		case ssautils.IsClusterDefinition(o):
			defs = append(defs, o)
		default:
			rest = append(rest, o)
		}
	}
	return defs, rest, digests
}

// applyStage applies objs concurrently, each written only when a dry run
// shows drift, and adds an entry per object to res.
func (s *Sink) applyStage(ctx context.Context, objs []*unstructured.Unstructured, res *Result) {
	sort.Sort(ssa.SortableUnstructureds(objs))
	entries := make([]Entry, len(objs))
	var g errgroup.Group
	g.SetLimit(s.cfg.Concurrency)
	for i, o := range objs {
		g.Go(func() error {
			ssautils.RemoveCABundleFromCRD(o)
			entries[i] = Entry{Object: refOf(o)}
			cse, err := s.rm.Apply(ctx, o, ssa.ApplyOptions{WaitInterval: waitInterval, WaitTimeout: s.cfg.WaitTimeout})
			if err != nil {
				entries[i].Action, entries[i].Err = Failed, err
				return nil
			}
			entries[i].Action = action(cse.Action)
			return nil
		})
	}
	_ = g.Wait()
	res.Entries = append(res.Entries, entries...)
}

// waitReady waits for the cluster definitions just created or configured
// (CRDs established, Namespaces active) before what needs them is applied.
func (s *Sink) waitReady(ctx context.Context, res *Result) error {
	var objs []*unstructured.Unstructured
	for _, e := range res.Entries {
		if e.Action == Created || e.Action == Configured {
			objs = append(objs, e.Object.unstructured())
		}
	}
	if len(objs) == 0 {
		return nil
	}
	set := object.UnstructuredSetToObjMetadataSet(objs)
	if err := s.rm.WaitForSetWithContext(ctx, set, ssa.WaitOptions{Interval: waitInterval, Timeout: s.cfg.WaitTimeout}); err != nil {
		return fmt.Errorf("apply: target %s: cluster definitions not ready: %w", res.Target, err)
	}
	return nil
}

// prune deletes the stale objects that are still owner's (see
// deleteOwned), adds an entry per object to res, and returns those it
// failed to delete (to stay in the inventory).
func (s *Sink) prune(ctx context.Context, stale []ObjectRef, owner string, res *Result) []ObjectRef {
	objs := make([]*unstructured.Unstructured, len(stale))
	for i, r := range stale {
		objs[i] = r.unstructured()
	}
	// Dependents before what they depend on: CRs before CRDs, objects
	// before their Namespace.
	sort.Sort(sort.Reverse(ssa.SortableUnstructureds(objs)))
	var kept []ObjectRef
	for _, o := range objs {
		e := Entry{Object: refOf(o), Action: Deleted}
		if err := s.reserved(owner, o); err != nil {
			// Recorded before the sink refused such objects: forgotten,
			// never deleted (its deletion would take every inventory).
			e.Action = Skipped
			res.Entries = append(res.Entries, e)
			continue
		}
		if other, err := s.containsOthers(ctx, owner, o); other != "" || err != nil {
			// Its deletion would delete what another target applied (in
			// the Namespace, of the CRD's kind), or what this one leaves
			// alone for its kind: forgotten, left in place, or kept to try
			// again when that cannot be told.
			e.Action, e.Err = Skipped, err
			if err != nil {
				e.Action = Failed
				kept = append(kept, e.Object)
			}
			res.Entries = append(res.Entries, e)
			continue
		}
		e.Action, e.Err = s.deleteOwned(ctx, o, owner)
		if e.Err != nil {
			kept = append(kept, e.Object)
		}
		res.Entries = append(res.Entries, e)
	}
	return kept
}

// deleteOwned deletes o when the object in the cluster is owner's (see
// liveOwner), not by its label's value alone, which targets may share:
// Skipped when it is another's or no one's, Deleted when it is gone (or
// its kind is, and the object with it). The deletion holds only for the
// object read (its UID), not for one created again meanwhile.
func (s *Sink) deleteOwned(ctx context.Context, o *unstructured.Unstructured, owner string) (Action, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(o.GroupVersionKind())
	err := s.client.Get(ctx, client.ObjectKeyFromObject(o), live)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return Deleted, nil
	case err != nil:
		return Failed, fmt.Errorf("apply: read %s: %w", refOf(o), err)
	case s.liveOwner(live) != owner:
		return Skipped, nil
	}
	uid := live.GetUID()
	err = s.client.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) {
		return Failed, fmt.Errorf("apply: delete %s: %w", refOf(o), err)
	}
	return Deleted, nil
}

// plan fills res with what apply would do, through dry runs.
func (s *Sink) plan(ctx context.Context, objs []*unstructured.Unstructured, old *inventory, res *Result) {
	for _, o := range objs {
		createOnly(o) // a dry run shows it as applying would show it the first time
	}
	sort.Sort(ssa.SortableUnstructureds(objs))
	entries := make([]Entry, len(objs))
	var g errgroup.Group
	g.SetLimit(s.cfg.Concurrency)
	for i, o := range objs {
		g.Go(func() error {
			ssautils.RemoveCABundleFromCRD(o)
			entries[i] = Entry{Object: refOf(o)}
			cse, live, merged, err := s.rm.Diff(ctx, o, ssa.DefaultDiffOptions())
			if err != nil {
				entries[i].Action, entries[i].Err = Failed, err
				return nil
			}
			entries[i].Action = action(cse.Action)
			if s.cfg.Mode == ModeDiff {
				entries[i].Live, entries[i].Merged = live, merged
			}
			return nil
		})
	}
	_ = g.Wait()
	res.Entries = append(res.Entries, entries...)
	s.planPrune(ctx, objs, old, res)
}

// planPrune fills res with what prune would do.
func (s *Sink) planPrune(ctx context.Context, objs []*unstructured.Unstructured, old *inventory, res *Result) {
	oldRefs, err := old.refs()
	if err != nil {
		res.Entries = append(res.Entries, Entry{Action: Failed, Err: err})
		return
	}
	want := make(map[string]bool, len(objs))
	for _, o := range objs {
		want[refOf(o).key()] = true
	}
	stale, _ := s.managed(notIn(oldRefs, want), res)
	if s.cfg.DisablePrune {
		return
	}
	owner := s.ownerOf(old)
	for _, r := range stale {
		live := r.unstructured()
		err := s.client.Get(ctx, client.ObjectKeyFromObject(live), live)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		case err != nil:
			res.Entries = append(res.Entries, Entry{Object: r, Action: Failed, Err: err})
		case s.liveOwner(live) != owner:
			res.Entries = append(res.Entries, Entry{Object: r, Action: Skipped})
		default:
			res.Entries = append(res.Entries, Entry{Object: r, Action: Deleted})
		}
	}
}

func action(a ssa.Action) Action {
	switch a {
	case ssa.CreatedAction:
		return Created
	case ssa.ConfiguredAction:
		return Configured
	case ssa.UnchangedAction:
		return Unchanged
	case ssa.DeletedAction:
		return Deleted
	case ssa.SkippedAction:
		return Skipped
	default:
		return Failed
	}
}

// unstructured is an empty object named by r.
func (r ObjectRef) unstructured() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind})
	u.SetNamespace(r.Namespace)
	u.SetName(r.Name)
	return u
}
