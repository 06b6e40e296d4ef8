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
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// LabelTarget is set on every object the sink applies: a digest of the
	// target ID and the field manager. Prune and cascade deletion touch
	// only objects whose label matches.
	LabelTarget = "apply.modwatch.io/target"
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
func (s *Sink) readInventory(ctx context.Context, targetID string) (*inventory, error) {
	cm := &corev1.ConfigMap{}
	err := s.client.Get(ctx, client.ObjectKey{Namespace: s.cfg.InventoryNamespace, Name: s.inventoryName(targetID)}, cm)
	if apierrors.IsNotFound(err) {
		return &inventory{Target: targetID}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("apply: read inventory of %s: %w", targetID, err)
	}
	inv := &inventory{}
	if err := json.Unmarshal([]byte(cm.Data[inventoryKey]), inv); err != nil {
		return nil, fmt.Errorf("apply: inventory %s/%s of %s: %w", cm.Namespace, cm.Name, targetID, err)
	}
	if inv.Target != targetID {
		return nil, fmt.Errorf("apply: inventory %s/%s belongs to %q, not %q", cm.Namespace, cm.Name, inv.Target, targetID)
	}
	return inv, nil
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

// writeInventory stores inv unless it equals old.
func (s *Sink) writeInventory(ctx context.Context, old, inv *inventory) error {
	if old != nil && slices.Equal(old.Entries, inv.Entries) {
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

// deleteInventory forgets the target.
func (s *Sink) deleteInventory(ctx context.Context, targetID string) error {
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = s.cfg.InventoryNamespace, s.inventoryName(targetID)
	if err := s.client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("apply: delete inventory of %s: %w", targetID, err)
	}
	return nil
}
