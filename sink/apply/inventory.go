package apply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modwatch/modwatch/watcher"
)

const (
	// LabelTarget is set on every object the sink applies: a digest of the
	// target ID and the field manager (unless Config.TrackingLabel and
	// Config.TrackingValue say otherwise). Prune and cascade deletion touch
	// only objects whose label matches.
	LabelTarget = "apply.modwatch.io/target"
	// AnnotationOwner is set on an applied object whose tracking label's
	// value is not its target's digest (see Config.TrackingValue): the
	// digest, which names the target's inventory. Where it is set, prune,
	// cascade deletion and the guard go by it, not by the label's value;
	// an object without the tracking label has no owner, whatever it says.
	AnnotationOwner = "apply.modwatch.io/owner"
	// LabelInventory marks the inventory ConfigMaps.
	LabelInventory = "apply.modwatch.io/inventory"
	// AnnotationTargetID on an inventory ConfigMap holds the target ID.
	AnnotationTargetID = "apply.modwatch.io/target-id"
	// LabelInstance on an inventory ConfigMap names the instance that owns
	// it (a digest of Config.Instance); absent for a sink without one.
	LabelInstance = "apply.modwatch.io/instance"
	// inventoryPrefix starts every inventory's name.
	inventoryPrefix = "modwatch-"

	inventoryKey = "inventory.json"
)

// owner is a target's label value and the name of its inventory: a digest
// of the field manager, the instance (when there is one) and the target.
func (s *Sink) owner(targetID string) string {
	key := s.cfg.FieldManager + "\x00" + targetID
	if s.cfg.Instance != "" {
		key = s.cfg.FieldManager + "\x00" + s.cfg.Instance + "\x00" + targetID
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:10])
}

func (s *Sink) inventoryName(targetID string) string { return inventoryPrefix + s.owner(targetID) }

// tracking is how a target's objects are marked: label=value, and owner
// (the digest that names its inventory) in AnnotationOwner when the value
// is not the owner.
type tracking struct{ label, value, owner string }

// mark sets o's tracking label and AnnotationOwner, whatever its manifest
// says of them.
func (tr tracking) mark(o *unstructured.Unstructured) {
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[tr.label] = tr.value
	o.SetLabels(l)
	a := o.GetAnnotations()
	switch {
	case tr.value != tr.owner:
		if a == nil {
			a = map[string]string{}
		}
		a[AnnotationOwner] = tr.owner
	case a != nil:
		delete(a, AnnotationOwner)
		if len(a) == 0 {
			a = nil
		}
	}
	o.SetAnnotations(a)
}

// tracking says how t's objects are marked. A value of
// Config.TrackingValue that is not a label value, or empty, is
// [watcher.Permanent].
func (s *Sink) tracking(t watcher.Target) (tracking, error) {
	tr := tracking{label: s.cfg.TrackingLabel, owner: s.owner(t.ID)}
	tr.value = tr.owner
	if s.cfg.TrackingValue == nil {
		return tr, nil
	}
	tr.value = s.cfg.TrackingValue(t)
	errs := validation.IsValidLabelValue(tr.value)
	if tr.value == "" {
		errs = append(errs, "it is empty")
	}
	if len(errs) > 0 {
		return tr, watcher.Permanent(fmt.Errorf("%w: target %s: the tracking value %q (Config.TrackingValue) is not a label value: %s; nothing applied", ErrInvalidConfig, t.ID, tr.value, strings.Join(errs, "; ")))
	}
	return tr, nil
}

// liveOwner is the owner of an object in the cluster, as tracking marked
// it: "" when it carries no tracking label, its AnnotationOwner when it
// has one, else its label's value (the digest itself, for an object
// applied under the default value).
func (s *Sink) liveOwner(live *unstructured.Unstructured) string {
	v := live.GetLabels()[s.cfg.TrackingLabel]
	if v == "" {
		return ""
	}
	if o := live.GetAnnotations()[AnnotationOwner]; o != "" {
		return o
	}
	return v
}

// legacyOwner is the owner of targetID for this field manager without an
// instance: what a sink that has one now had before it had.
func (s *Sink) legacyOwner(targetID string) string {
	sum := sha256.Sum256([]byte(s.cfg.FieldManager + "\x00" + targetID))
	return hex.EncodeToString(sum[:10])
}

// instanceLabel is the value of LabelInstance on this sink's inventories;
// "" without an instance.
func (s *Sink) instanceLabel() string {
	if s.cfg.Instance == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(s.cfg.Instance))
	return hex.EncodeToString(sum[:10])
}

// ownSelector selects this sink's inventories: of its field manager, and
// of its instance (or of none, without one).
func (s *Sink) ownSelector() (labels.Selector, error) {
	sel := labels.SelectorFromSet(labels.Set{LabelInventory: "true", "app.kubernetes.io/managed-by": s.cfg.FieldManager})
	op, values := selection.DoesNotExist, []string(nil)
	if v := s.instanceLabel(); v != "" {
		op, values = selection.Equals, []string{v}
	}
	req, err := labels.NewRequirement(LabelInstance, op, values)
	if err != nil {
		return nil, err
	}
	return sel.Add(*req), nil
}

// inventory is what a target applied, as stored in its ConfigMap.
type inventory struct {
	Target  string     `json:"target"`
	Entries []invEntry `json:"entries"`

	// legacy is the name of the ConfigMap it was read from when that is
	// the target's inventory from before the sink had an instance; its
	// objects carry legacyOwner's label. Not stored.
	legacy, legacyOwner string
}

// invEntry is an object: ID is "namespace_name_group_kind" (no field of
// which may hold "_"), V its version, D the digest of the object as last
// applied ("" when unknown).
type invEntry struct {
	ID string `json:"id"`
	V  string `json:"v"`
	D  string `json:"d,omitempty"`
}

func (e invEntry) ref() (ObjectRef, error) {
	parts := strings.Split(e.ID, "_")
	if len(parts) != 4 || parts[1] == "" || parts[3] == "" || e.V == "" {
		return ObjectRef{}, fmt.Errorf("apply: malformed inventory entry %q", e.ID)
	}
	return ObjectRef{Namespace: parts[0], Name: parts[1], Group: parts[2], Kind: parts[3], Version: e.V}, nil
}

// entries is an inventory being built, by object key.
type entries map[string]invEntry

func (es entries) add(r ObjectRef, digest string) {
	es[r.key()] = invEntry{ID: r.key(), V: r.Version, D: digest}
}

func (es entries) inventory(target string) *inventory {
	inv := &inventory{Target: target, Entries: slices.Collect(maps.Values(es))}
	slices.SortFunc(inv.Entries, func(a, b invEntry) int { return strings.Compare(a.ID, b.ID) })
	return inv
}

// entries returns the inventory's entries by key.
func (inv *inventory) entries() entries {
	es := make(entries, len(inv.Entries))
	for _, e := range inv.Entries {
		es[e.ID] = e
	}
	return es
}

// refs returns the inventory's objects.
func (inv *inventory) refs() ([]ObjectRef, error) {
	out := make([]ObjectRef, 0, len(inv.Entries))
	for _, e := range inv.Entries {
		r, err := e.ref()
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// digest identifies what is applied for o: a change of digest is a change
// of the desired object.
func digest(o *unstructured.Unstructured) string {
	data, err := json.Marshal(o.Object) // map keys sorted: stable
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}

// readInventory returns the target's inventory, empty when it has none.
// A sink with an instance that finds none under its name takes the
// target's inventory from before it had one (same field manager, no
// instance label), and moves it under its own name at the next write.
func (s *Sink) readInventory(ctx context.Context, targetID string) (*inventory, error) {
	inv, found, err := s.readInventoryNamed(ctx, targetID, s.inventoryName(targetID), s.instanceLabel())
	if err != nil || found || s.cfg.Instance == "" {
		return inv, err
	}
	legacy := inventoryPrefix + s.legacyOwner(targetID)
	old, found, err := s.readInventoryNamed(ctx, targetID, legacy, "")
	if err != nil || !found {
		return inv, err
	}
	old.legacy, old.legacyOwner = legacy, s.legacyOwner(targetID)
	return old, nil
}

// readInventoryNamed reads the inventory of targetID in the ConfigMap name,
// whose instance label must be instance ("": none).
func (s *Sink) readInventoryNamed(ctx context.Context, targetID, name, instance string) (*inventory, bool, error) {
	cm := &corev1.ConfigMap{}
	err := s.client.Get(ctx, client.ObjectKey{Namespace: s.cfg.InventoryNamespace, Name: name}, cm)
	if apierrors.IsNotFound(err) {
		return &inventory{Target: targetID}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("apply: read inventory of %s: %w", targetID, err)
	}
	if v := cm.Labels[LabelInstance]; v != instance {
		return nil, false, fmt.Errorf("%w: inventory %s/%s of %s is another instance's", ErrConflict, cm.Namespace, cm.Name, targetID)
	}
	inv := &inventory{}
	if err := json.Unmarshal([]byte(cm.Data[inventoryKey]), inv); err != nil {
		return nil, false, fmt.Errorf("apply: inventory %s/%s of %s: %w", cm.Namespace, cm.Name, targetID, err)
	}
	if inv.Target != targetID {
		return nil, false, fmt.Errorf("apply: inventory %s/%s belongs to %q, not %q", cm.Namespace, cm.Name, inv.Target, targetID)
	}
	return inv, true, nil
}

// inventoryLabels are the labels of the inventory of targetID.
func (s *Sink) inventoryLabels(targetID string) map[string]any {
	l := map[string]any{
		LabelInventory:                 "true",
		s.cfg.TrackingLabel:            s.owner(targetID),
		"app.kubernetes.io/managed-by": s.cfg.FieldManager,
	}
	if v := s.instanceLabel(); v != "" {
		l[LabelInstance] = v
	}
	return l
}

// writeInventory stores inv unless it equals old (read from its own
// name). An inventory read from its name before instances is moved: the
// new one written, the old one deleted.
func (s *Sink) writeInventory(ctx context.Context, old, inv *inventory) error {
	if old != nil && old.legacy == "" && slices.Equal(old.Entries, inv.Entries) {
		return nil
	}
	data, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":        s.inventoryName(inv.Target),
			"namespace":   s.cfg.InventoryNamespace,
			"labels":      s.inventoryLabels(inv.Target),
			"annotations": map[string]any{AnnotationTargetID: inv.Target},
		},
		"data": map[string]any{inventoryKey: string(data)},
	}}
	if err := s.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(cm), client.ForceOwnership, client.FieldOwner(s.cfg.FieldManager)); err != nil {
		return fmt.Errorf("apply: write inventory of %s: %w", inv.Target, err)
	}
	if old != nil && old.legacy != "" {
		// Moved: the one from before instances goes. Should that fail, it
		// is read again at the next delivery (never listed by Targets).
		legacy := &corev1.ConfigMap{}
		legacy.Namespace, legacy.Name = s.cfg.InventoryNamespace, old.legacy
		if err := s.client.Delete(ctx, legacy); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("apply: delete the inventory of %s from before instances: %w", inv.Target, err)
		}
		old.legacy = ""
	}
	return nil
}

// Targets lists the targets this sink holds an inventory for: those of
// its field manager and its instance in its inventory namespace, by the
// target ID each names (the watcher removes those no source wants any
// more; see watcher.Inventory). Another instance's are never listed. In
// ModeDryRun and ModeDiff it holds none.
func (s *Sink) Targets(ctx context.Context) ([]string, error) {
	if s.cfg.Mode != ModeApply {
		return nil, nil
	}
	sel, err := s.ownSelector()
	if err != nil {
		return nil, err
	}
	var list corev1.ConfigMapList
	if err := s.client.List(ctx, &list, client.InNamespace(s.cfg.InventoryNamespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("apply: list inventories in %s: %w", s.cfg.InventoryNamespace, err)
	}
	var ids []string
	for _, cm := range list.Items {
		id := cm.Annotations[AnnotationTargetID]
		if id != "" && cm.Name == s.inventoryName(id) { // ours: the name is the digest of our manager, instance and the ID
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// checkInventoryNamespace refuses to apply anything while the inventory's
// namespace is missing: the objects would be applied and their record
// lost. Once found, it is not asked again.
func (s *Sink) checkInventoryNamespace(ctx context.Context) error {
	if s.cfg.Mode != ModeApply || s.inventoryNS.Load() {
		return nil
	}
	// A dry-run create of a ConfigMap there: what the sink may do anyway
	// (no right to read Namespaces needed), and only a missing namespace
	// makes it fail with that namespace not found.
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "modwatch-probe-", Namespace: s.cfg.InventoryNamespace}}
	err := s.client.Create(ctx, probe, client.DryRunAll)
	var status apierrors.APIStatus
	if apierrors.IsNotFound(err) && errors.As(err, &status) && status.Status().Details != nil && status.Status().Details.Kind == "namespaces" {
		return fmt.Errorf("apply: the inventory namespace %q does not exist (create it, or set Config.InventoryNamespace): nothing applied", s.cfg.InventoryNamespace)
	}
	if err != nil {
		return fmt.Errorf("apply: inventory namespace %q: %w", s.cfg.InventoryNamespace, err)
	}
	s.inventoryNS.Store(true)
	return nil
}

// deleteInventory forgets the target: its inventory, and with an
// instance the one from before instances too.
func (s *Sink) deleteInventory(ctx context.Context, targetID string) error {
	names := []string{s.inventoryName(targetID)}
	if s.cfg.Instance != "" {
		names = append(names, inventoryPrefix+s.legacyOwner(targetID))
	}
	for _, name := range names {
		cm := &corev1.ConfigMap{}
		cm.Namespace, cm.Name = s.cfg.InventoryNamespace, name
		if err := s.client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("apply: delete inventory of %s: %w", targetID, err)
		}
	}
	return nil
}

// ownerOf is the owner whose label inv's objects carry: the sink's for its
// target, or the one from before instances for an inventory from then.
func (s *Sink) ownerOf(inv *inventory) string {
	if inv.legacyOwner != "" {
		return inv.legacyOwner
	}
	return s.owner(inv.Target)
}
