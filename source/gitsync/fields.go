package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// ForeignFields are the fields of a GitSync's status that field managers
// other than the source's own ([Config.FieldManager]) own: those its
// metadata.managedFields give them, and those an apply conflict named.
// The source never writes them, and a [StatusWriter] leaves them out
// ([ForeignFields.Strip]). The zero value holds none.
//
// What is left out follows the schema of the list or field another
// manager holds:
//   - a field (phase, message): that field;
//   - a field of commitStatus: the whole of it, a record of one sync
//     whose fields say of its hash (a synced, syncTime or error of the
//     source's under another's hash would say that commit was synced, or
//     failed, when the source synced another);
//   - an atomic list, as Numaplane's conditions are: the whole list, so
//     that the source's Synced condition is not written (phase, message
//     and commitStatus, when not another's, still say how the last sync
//     went);
//   - a list of conditions keyed by type (listType=map): the conditions
//     whose type another manager holds; of a condition whose type is the
//     source's but some of whose fields another changed, those fields.
type ForeignFields struct {
	set   *fieldpath.Set // the paths under .status
	taken *fieldpath.Set // [Config.TakeOver]'s managers' paths under .status
	read  string         // the resourceVersion they were read from
}

var statusElement = fieldpath.FieldNameElement("status")

// foreignFields reads from obj's managedFields the status fields that a
// manager other than manager's apply of the status subresource owns, and
// apart those of the managers takeOver names (any operation). An entry it
// cannot read is left out and said in err: the source, which then forces
// nothing (takeOver's fields are not taken while one is there), learns its
// fields from the conflict they cause.
func foreignFields(obj metav1.Object, manager string, takeOver []string) (ForeignFields, error) {
	set, taken := fieldpath.NewSet(), fieldpath.NewSet()
	var errs []error
	for _, e := range obj.GetManagedFields() {
		if e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "status" {
			continue
		}
		owned, err := managedSet(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("managedFields of %q: %w", e.Manager, err))
			continue
		}
		if slices.Contains(takeOver, e.Manager) {
			taken = taken.Union(owned.WithPrefix(statusElement))
		} else {
			set = set.Union(owned.WithPrefix(statusElement))
		}
	}
	if len(errs) > 0 {
		taken = nil // a forced write would take the unread entries' fields
	}
	return ForeignFields{set: wholeRecords(set), taken: taken, read: obj.GetResourceVersion()}, errors.Join(errs...)
}

// managedSet returns the fields of a managedFields entry (none when it
// names none).
func managedSet(e metav1.ManagedFieldsEntry) (*fieldpath.Set, error) {
	owned := &fieldpath.Set{}
	if e.FieldsV1 == nil {
		return owned, nil
	}
	if e.FieldsType != "FieldsV1" {
		return nil, fmt.Errorf("fields of type %q", e.FieldsType)
	}
	// MarshalJSON, not Raw: the JSON form whatever the wire's (CBOR).
	raw, err := e.FieldsV1.MarshalJSON()
	if err == nil {
		err = owned.FromJSON(bytes.NewReader(raw))
	}
	return owned, err
}

// TakeOver says whether writing s takes a field of a [Config.TakeOver]
// manager: then the write is forced, with resourceVersion as its
// precondition (the version the fields were read from, so that a field
// another manager took since is not taken with them).
func (f ForeignFields) TakeOver(s Status) (resourceVersion string, force bool) {
	if f.taken == nil || f.taken.Empty() || f.read == "" {
		return "", false // no version to force on: the fields stay theirs
	}
	u, err := f.Strip(s)
	if err != nil {
		return "", false
	}
	// What is sent, but its maps (commitStatus, a condition): a map the
	// other manager still owns as such (".") after its fields were taken
	// is no conflict, and would force every later write.
	sent := fieldpath.NewSet()
	walkPaths(nil, u, func(p fieldpath.Path, v any) {
		if _, isMap := v.(map[string]any); !isMap {
			sent.Insert(p)
		}
	})
	if f.taken.Intersection(sent).Empty() {
		return "", false
	}
	return f.read, true
}

var commitStatusElement = fieldpath.FieldNameElement("commitStatus")

// wholeRecords returns set with commitStatus held whole when set holds
// any of it (see ForeignFields).
func wholeRecords(set *fieldpath.Set) *fieldpath.Set {
	if _, deeper := set.Children.Get(commitStatusElement); !deeper {
		return set
	}
	out := fieldpath.NewSet(fieldpath.MakePathOrDie("commitStatus"))
	set.Iterate(func(p fieldpath.Path) {
		if !p[0].Equals(commitStatusElement) {
			out.Insert(p)
		}
	})
	return out
}

// String lists the fields as the apiserver names them (".status.phase").
func (f ForeignFields) String() string {
	if f.set == nil {
		return ""
	}
	var out []string
	f.set.Leaves().Iterate(func(p fieldpath.Path) { out = append(out, ".status"+p.String()) })
	return strings.Join(out, ", ")
}

// Strip returns s, in the unstructured form a writer sends as the status,
// without the foreign fields.
func (f ForeignFields) Strip(s Status) (map[string]any, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
	if err != nil {
		return nil, fmt.Errorf("gitsync: status: %w", err)
	}
	if f.set != nil {
		stripMap(u, f.set)
	}
	f.clearTaken(u)
	return u, nil
}

// clearTaken sets to its zero value, in u, each field of a record u
// holds (of commitStatus, of a condition) that a [Config.TakeOver]
// manager owns and the source has not (an error of commitStatus, when it
// synced): the forced write takes it, and the record is the source's, not
// the source's fields beside the other's (null is refused by the schema;
// the source's next write, which leaves the field out, removes it).
func (f ForeignFields) clearTaken(u map[string]any) {
	if f.taken == nil {
		return
	}
	f.taken.Leaves().Iterate(func(p fieldpath.Path) {
		if len(p) < 2 {
			return
		}
		last := p[len(p)-1].FieldName
		if last == nil || (f.set != nil && f.set.Has(p)) {
			return
		}
		zero, known := zeroFields[*last]
		if parent, ok := lookup(u, p[:len(p)-1]); ok && known {
			if _, there := parent[*last]; !there {
				parent[*last] = zero
			}
		}
	})
}

// zeroFields are the fields of the records of a [Status] that are left
// out when empty, with their zero values.
var zeroFields = map[string]any{"error": "", "observedGeneration": int64(0)}

// lookup returns the map at p in m, the items of a list named by their
// key fields.
func lookup(m map[string]any, p fieldpath.Path) (map[string]any, bool) {
	var v any = m
	for _, pe := range p {
		switch x := v.(type) {
		case map[string]any:
			if pe.FieldName == nil {
				return nil, false
			}
			v = x[*pe.FieldName]
		case []any:
			if pe.Key == nil {
				return nil, false
			}
			i := slices.IndexFunc(x, func(item any) bool {
				im, ok := item.(map[string]any)
				return ok && hasKey(im, pe)
			})
			if i < 0 {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	out, ok := v.(map[string]any)
	return out, ok
}

// hasKey says whether item has the key fields of pe.
func hasKey(item map[string]any, pe fieldpath.PathElement) bool {
	for _, f := range *pe.Key {
		v, ok := item[f.Name]
		if !ok || !value.Equals(value.NewValueInterface(v), f.Value) {
			return false
		}
	}
	return true
}

// keep returns s without the foreign fields, as a Status: a field of
// commitStatus left out reads as its zero value.
func (f ForeignFields) keep(s Status) Status {
	u, err := f.Strip(s)
	if err != nil {
		return s
	}
	kept, err := decodeStatus(map[string]any{"status": u})
	if err != nil {
		return s
	}
	return kept
}

// stripMap removes from m the fields set holds: one held whole (a field,
// an atomic list) goes; one whose fields or items are held loses those.
func stripMap(m map[string]any, set *fieldpath.Set) {
	for k, v := range m {
		pe := fieldpath.FieldNameElement(k)
		child, deeper := set.Children.Get(pe)
		switch {
		case deeper:
			if v = strip(v, child); v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		case set.Members.Has(pe):
			delete(m, k)
		}
	}
}

// strip removes from v what set holds of it; nil when nothing is left.
func strip(v any, set *fieldpath.Set) any {
	switch v := v.(type) {
	case map[string]any:
		stripMap(v, set)
		if len(v) == 0 {
			return nil
		}
		return v
	case []any:
		return stripList(v, set)
	}
	return nil // a value set holds parts of, which has none: another's
}

// stripList removes from l the items another manager's: an item whose
// key fields set holds goes whole; one of whose other fields set holds
// loses those. A list whose items set does not name by key (by index, by
// value) is left out whole.
func stripList(l []any, set *fieldpath.Set) any {
	var out []any
	for _, item := range l {
		m, ok := item.(map[string]any)
		if !ok {
			return nil
		}
		pe, found, keyed := itemElement(m, set)
		if !keyed {
			return nil
		}
		if !found {
			out = append(out, m)
			continue
		}
		child, deeper := set.Children.Get(pe)
		if !deeper || ownsKey(child, pe) {
			continue
		}
		stripMap(m, child)
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// itemElement finds the element of set that names item by its key;
// keyed is false when set names items otherwise.
func itemElement(item map[string]any, set *fieldpath.Set) (pe fieldpath.PathElement, found, keyed bool) {
	keyed = true
	match := func(e fieldpath.PathElement) {
		if e.Key == nil {
			keyed = false
			return
		}
		for _, f := range *e.Key {
			v, ok := item[f.Name]
			if !ok || !value.Equals(value.NewValueInterface(v), f.Value) {
				return
			}
		}
		pe, found = e, true
	}
	set.Members.Iterate(match)
	set.Children.Iterate(match)
	return pe, found, keyed
}

// ownsKey says whether item holds every key field of pe.
func ownsKey(item *fieldpath.Set, pe fieldpath.PathElement) bool {
	for _, f := range *pe.Key {
		if !item.Members.Has(fieldpath.FieldNameElement(f.Name)) {
			return false
		}
	}
	return true
}

// overlay returns s with cur's value of each part of the status another
// manager owns any of (the phase, the message, commitStatus, a condition,
// all of them when the list is atomic): the source's mutations start from
// the status as it is, and decide on the other's values, not on values
// it never wrote.
func (f ForeignFields) overlay(s, cur Status) Status {
	if f.set == nil {
		return s
	}
	held := func(name string) bool {
		pe := fieldpath.FieldNameElement(name)
		_, deeper := f.set.Children.Get(pe)
		return deeper || f.set.Members.Has(pe)
	}
	if held("phase") {
		s.Phase = cur.Phase
	}
	if held("message") {
		s.Message = cur.Message
	}
	if held("commitStatus") {
		s.CommitStatus = copyStatus(cur).CommitStatus
	}
	s.Conditions = f.overlayConditions(s.Conditions, cur.Conditions)
	return s
}

// overlayConditions returns mine with theirs' condition of each type
// another manager holds, or theirs when it holds the list.
func (f ForeignFields) overlayConditions(mine, theirs []metav1.Condition) []metav1.Condition {
	pe := fieldpath.FieldNameElement("conditions")
	items, deeper := f.set.Children.Get(pe)
	if !deeper {
		if f.set.Members.Has(pe) {
			return slices.Clone(theirs)
		}
		return mine
	}
	var types []string
	whole := false
	collect := func(e fieldpath.PathElement) {
		if e.Key == nil || len(*e.Key) != 1 || (*e.Key)[0].Name != "type" || !(*e.Key)[0].Value.IsString() {
			whole = true
			return
		}
		types = append(types, (*e.Key)[0].Value.AsString())
	}
	items.Members.Iterate(collect)
	items.Children.Iterate(collect)
	if whole {
		return slices.Clone(theirs)
	}
	out := slices.Clone(mine)
	for _, t := range types {
		c := meta.FindStatusCondition(theirs, t)
		i := slices.IndexFunc(out, func(x metav1.Condition) bool { return x.Type == t })
		switch {
		case c == nil && i >= 0:
			out = slices.Delete(out, i, i+1)
		case c != nil && i >= 0:
			out[i] = *c
		case c != nil:
			out = append(out, *c)
		}
	}
	return out
}

// with returns f and the fields of s that err, a conflict of a
// server-side apply, names (its causes); ok is false when err is no such
// conflict or names no field of s. A cause naming a part of a field the
// source does not know of leaves out the field it is in.
func (f ForeignFields) with(err error, s Status) (more ForeignFields, ok bool) {
	var st apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &st) || st.Status().Details == nil {
		return f, false
	}
	u, serr := f.Strip(s)
	if serr != nil {
		return f, false
	}
	var paths []fieldpath.Path
	walkPaths(nil, u, func(p fieldpath.Path, _ any) { paths = append(paths, p) })
	set := fieldpath.NewSet()
	for _, c := range st.Status().Details.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			continue
		}
		if p, found := longestPrefix(paths, c.Field); found {
			set.Insert(p)
		}
	}
	if set.Empty() {
		return f, false
	}
	return f.union(ForeignFields{set: wholeRecords(set)}), true
}

// union returns the fields of f and of g, and what f takes over.
func (f ForeignFields) union(g ForeignFields) ForeignFields {
	switch {
	case g.set == nil:
		return f
	case f.set == nil:
		f.set = g.set
		return f
	}
	f.set = wholeRecords(f.set.Union(g.set))
	return f
}

// walkPaths calls fn with the path and value of each field in v; the
// items of a list are named by their type (conditions), else by their
// index.
func walkPaths(prefix fieldpath.Path, v any, fn func(fieldpath.Path, any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			p := append(prefix.Copy(), fieldpath.FieldNameElement(k))
			fn(p, x)
			walkPaths(p, x, fn)
		}
	case []any:
		for i, x := range v {
			pe := fieldpath.IndexElement(i)
			if m, ok := x.(map[string]any); ok {
				if t, ok := m["type"].(string); ok {
					pe = fieldpath.KeyElementByFields("type", t)
				}
			}
			p := append(prefix.Copy(), pe)
			fn(p, x)
			walkPaths(p, x, fn)
		}
	}
}

// longestPrefix returns the longest of paths that field, as the apiserver
// names it (".status.conditions[type=\"Synced\"].reason"), is or is in.
func longestPrefix(paths []fieldpath.Path, field string) (fieldpath.Path, bool) {
	var best fieldpath.Path
	for _, p := range paths {
		name := ".status" + p.String()
		rest, in := strings.CutPrefix(field, name)
		if in && (rest == "" || rest[0] == '.' || rest[0] == '[') && len(p) > len(best) {
			best = p
		}
	}
	return best, best != nil
}
