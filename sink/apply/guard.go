package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrConflict is returned (wrapped) when a target's objects would touch
// what is not its own: an inventory of this sink, the namespace that holds
// them, or an object another target of this sink applied. Nothing of the
// delivery is applied; it is retried.
var ErrConflict = errors.New("apply: conflict")

// inventoryName matches the name of an inventory ConfigMap.
var inventoryName = regexp.MustCompile(`^` + inventoryPrefix + `[0-9a-f]{20}$`)

// guard refuses a delivery of targetID whose objects would create, change
// or delete what the sink keeps for itself (an inventory, of any target or
// program; the inventory namespace, whose prune would take every
// inventory with it) or an object another target applied (one that
// carries another owner's tracking label), as Argo CD's
// FailOnSharedResource does. Every object is read, Concurrency at a time,
// those its inventory (old) records too: one of them that was deleted
// and created again by another target (while this one's kind was left
// alone, or between two deliveries) is that target's now, and is not
// taken over (then pruned) on the strength of an old record.
//
// The objects it does not record are claimed for the delivery in this
// process (release, called when the delivery ended, lets go), so that two
// targets' deliveries that start at once cannot both find an object absent
// and both record it.
func (s *Sink) guard(ctx context.Context, targetID, dest string, objs []*unstructured.Unstructured, old *inventory) (release func(), err error) {
	recorded := old.entries()
	for _, o := range objs {
		if err := s.reserved(targetID, o); err != nil {
			return func() {}, err
		}
	}
	var fresh []*unstructured.Unstructured
	for _, o := range objs {
		if _, ok := recorded[refOf(o).key()]; !ok {
			fresh = append(fresh, o)
		}
	}
	release, err = s.claims.claim(targetID, fresh)
	if err != nil {
		return release, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(s.cfg.Concurrency, 1))
	for _, o := range objs {
		g.Go(func() error { return s.notAnothers(gctx, targetID, dest, o) })
	}
	return release, g.Wait()
}

// claims are the objects the deliveries under way may create, by object,
// each with its target.
type claims struct {
	mu sync.Mutex
	by map[string]string
}

// claim takes objs for targetID, or none of them when another target's
// delivery holds one (a conflict); release lets go of them.
func (c *claims) claim(targetID string, objs []*unstructured.Unstructured) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range objs {
		if other, ok := c.by[refOf(o).key()]; ok && other != targetID {
			return func() {}, fmt.Errorf("%w: target %s: %s is being applied by target %s now: refused, nothing applied", ErrConflict, targetID, refOf(o), other)
		}
	}
	if c.by == nil {
		c.by = map[string]string{}
	}
	var mine []string
	for _, o := range objs {
		k := refOf(o).key()
		if _, ok := c.by[k]; !ok {
			c.by[k] = targetID
			mine = append(mine, k)
		}
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, k := range mine {
			delete(c.by, k)
		}
	}, nil
}

// reserved refuses an object that is one of the sink's own records, or
// the namespace that holds them.
func (s *Sink) reserved(targetID string, o *unstructured.Unstructured) error {
	gk := o.GroupVersionKind().GroupKind()
	switch {
	case gk.Group == "" && gk.Kind == "Namespace" && o.GetName() == s.cfg.InventoryNamespace:
		return fmt.Errorf("%w: target %s: %s holds this sink's inventories: no target may apply it (its prune would delete them); nothing applied", ErrConflict, targetID, refOf(o))
	case gk.Group == "" && gk.Kind == "ConfigMap" && o.GetNamespace() == s.cfg.InventoryNamespace && inventoryName.MatchString(o.GetName()),
		o.GetLabels()[LabelInventory] != "":
		return fmt.Errorf("%w: target %s: %s is, or poses as, an inventory of this sink: a manifest may not create, change or delete one; nothing applied", ErrConflict, targetID, refOf(o))
	}
	return nil
}

// notAnothers refuses o when the live object is another owner's (its
// AnnotationOwner, or its tracking label's value without one: see
// liveOwner), unless that owner is one of this sink's whose inventory
// no longer records it (removed from its render with prune off): an
// owner this sink's inventories do not know (another install, a target
// removed without cascade) is refused too, for its objects stay its own
// until their label is taken off. The label of targetID's owner from
// before instances is its own; one its value alone marks may be adopted
// (see adopts; dest is the target's destination namespace).
func (s *Sink) notAnothers(ctx context.Context, targetID, dest string, o *unstructured.Unstructured) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(o.GroupVersionKind())
	err := s.client.Get(ctx, client.ObjectKeyFromObject(o), live)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil // not there yet (or its kind comes with this delivery)
	}
	if err != nil {
		return fmt.Errorf("apply: target %s: read %s: %w", targetID, refOf(o), err)
	}
	other := s.liveOwner(live)
	if other == "" || other == s.owner(targetID) || other == s.legacyOwner(targetID) {
		return nil
	}
	if s.adopts(live, o, dest) {
		return nil // marked by this target's value alone, by the program it moves from: taken over
	}
	digest := inventoryName.MatchString(inventoryPrefix + other) // a value of Config.TrackingValue names no inventory
	cm := &corev1.ConfigMap{}
	if digest {
		err = s.client.Get(ctx, client.ObjectKey{Namespace: s.cfg.InventoryNamespace, Name: inventoryPrefix + other}, cm)
	}
	if !digest || apierrors.IsNotFound(err) {
		mark := s.cfg.TrackingLabel + "=" + live.GetLabels()[s.cfg.TrackingLabel]
		if a := live.GetAnnotations()[AnnotationOwner]; a != "" {
			mark += " (" + AnnotationOwner + "=" + a + ")"
		}
		return fmt.Errorf("%w: target %s: %s carries the tracking label %s of an owner this sink has no inventory of (another install or program, or a target removed without cascade deletion): refused, nothing applied; take the label off the object to let this target apply it", ErrConflict, targetID, refOf(o), mark)
	}
	if err != nil {
		return fmt.Errorf("apply: target %s: read the inventory of the owner of %s: %w", targetID, refOf(o), err)
	}
	var inv inventory
	if err := json.Unmarshal([]byte(cm.Data[inventoryKey]), &inv); err != nil {
		return fmt.Errorf("%w: target %s: %s carries the label of %s/%s, an inventory that cannot be read (%v): refused, nothing applied", ErrConflict, targetID, refOf(o), cm.Namespace, cm.Name, err)
	}
	if _, ok := inv.entries()[refOf(o).key()]; !ok {
		return nil
	}
	return fmt.Errorf("%w: target %s: %s is applied by target %s (its inventory %s/%s records it): refused, nothing applied", ErrConflict, targetID, refOf(o), inv.Target, cm.Namespace, cm.Name)
}

// adopts reports whether live, which o renders, is taken over by
// Config.AdoptByValue: marked by o's tracking value alone (no
// AnnotationOwner), a value that is no digest (the default value of this
// sink's targets, never adopted), and in dest, the target's destination
// namespace. A value may be shared (two GitSyncs of one name): a
// cluster-scoped object, or one in another namespace (another GitSync's
// destination), is no evidence of whose it was, and is refused.
func (s *Sink) adopts(live, o *unstructured.Unstructured, dest string) bool {
	v := live.GetLabels()[s.cfg.TrackingLabel]
	return s.cfg.AdoptByValue && live.GetAnnotations()[AnnotationOwner] == "" && v != "" &&
		v == o.GetLabels()[s.cfg.TrackingLabel] && !inventoryName.MatchString(inventoryPrefix+v) &&
		live.GetNamespace() != "" && live.GetNamespace() == dest
}

// emptyHold remembers, by target, since when its render has been empty
// while its inventory holds objects.
type emptyHold struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// holdEmpty says whether pruning every one of the n objects of targetID, whose
// render is empty, must wait: until the render has been empty for
// Config.EmptyRenderConfirm. A render that is not empty (n == 0 or
// objects rendered) ends the hold.
func (s *Sink) holdEmpty(targetID string, rendered, n int) error {
	s.empty.mu.Lock()
	defer s.empty.mu.Unlock()
	if rendered > 0 || n == 0 || s.cfg.DisablePrune || s.cfg.EmptyRenderConfirm < 0 {
		delete(s.empty.since, targetID)
		return nil
	}
	if s.empty.since == nil {
		s.empty.since = map[string]time.Time{}
	}
	since, ok := s.empty.since[targetID]
	if !ok {
		since = time.Now()
		s.empty.since[targetID] = since
	}
	if left := s.cfg.EmptyRenderConfirm - time.Since(since); left > 0 {
		return fmt.Errorf("apply: target %s renders nothing: pruning all %d of its objects is held until it has rendered nothing for %s (%s more): deletion budget", targetID, n, s.cfg.EmptyRenderConfirm, left.Round(time.Second))
	}
	delete(s.empty.since, targetID)
	return nil
}

// containsOthers reports which target's inventory (of any field manager
// or instance, in the inventory namespace) records an object that deleting
// o would delete with it, an object that is not owner's to delete: an
// object in o when o is a Namespace, one of o's kind when o is a
// CustomResourceDefinition. Those of owner's own inventory that are left
// alone for their kind (IncludeSkip) count too: they are not to be
// deleted either. Another install's target of the same ID is another
// target. "" when none, or when o is neither. A prune or a cascade leaves
// such an o in place.
func (s *Sink) containsOthers(ctx context.Context, owner string, o *unstructured.Unstructured) (string, error) {
	gk := o.GroupVersionKind().GroupKind()
	var inside func(ObjectRef) bool
	switch {
	case gk.Group == "" && gk.Kind == "Namespace":
		inside = func(r ObjectRef) bool { return r.Namespace == o.GetName() }
	case gk.Group == "apiextensions.k8s.io" && gk.Kind == "CustomResourceDefinition":
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		if err := s.client.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
			if apierrors.IsNotFound(err) {
				return "", nil
			}
			return "", fmt.Errorf("apply: read %s: %w", refOf(o), err)
		}
		group, _, _ := unstructured.NestedString(live.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(live.Object, "spec", "names", "kind")
		inside = func(r ObjectRef) bool { return r.Group == group && r.Kind == kind }
	default:
		return "", nil
	}
	return s.recordsInside(ctx, owner, inside)
}

// recordsInside returns the target of an inventory in the inventory
// namespace that records an object inside says is in what is deleted:
// any object for another's inventory, one left alone for its kind for
// owner's own (inventoryPrefix+owner).
func (s *Sink) recordsInside(ctx context.Context, owner string, inside func(ObjectRef) bool) (string, error) {
	var list corev1.ConfigMapList
	if err := s.client.List(ctx, &list, client.InNamespace(s.cfg.InventoryNamespace), client.MatchingLabels{LabelInventory: "true"}); err != nil {
		return "", fmt.Errorf("apply: list inventories in %s: %w", s.cfg.InventoryNamespace, err)
	}
	for _, cm := range list.Items {
		var inv inventory
		if err := json.Unmarshal([]byte(cm.Data[inventoryKey]), &inv); err != nil {
			continue
		}
		own := cm.Name == inventoryPrefix+owner
		refs, _ := inv.refs()
		for _, r := range refs {
			if inside(r) && (!own || s.cfg.outside(r.GroupKind())) {
				return inv.Target, nil
			}
		}
	}
	return "", nil
}
