package gitsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// entry is a managedFields entry of the status subresource.
func entry(t *testing.T, manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
	t.Helper()
	f := &metav1.FieldsV1{}
	require.NoError(t, f.UnmarshalJSON([]byte(fields)))
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: "status", FieldsType: "FieldsV1", FieldsV1: f}
}

// foreignOf is the fields other managers own, given as one entry's fieldsV1.
func foreignOf(t *testing.T, fields string) ForeignFields {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetManagedFields([]metav1.ManagedFieldsEntry{entry(t, "numaplane-controller", metav1.ManagedFieldsOperationUpdate, fields)})
	f, err := foreignFields(u, DefaultFieldManager, nil)
	require.NoError(t, err)
	return f
}

const (
	configuredKey = `"k:{\"type\":\"Configured\"}"`
	syncedKey     = `"k:{\"type\":\"Synced\"}"`
)

func TestForeignFieldsAreReadFromManagedFields(t *testing.T) {
	apply, update := metav1.ManagedFieldsOperationApply, metav1.ManagedFieldsOperationUpdate
	for _, tc := range []struct {
		name    string
		entries func(t *testing.T) []metav1.ManagedFieldsEntry
		want    string
		err     bool
	}{
		{name: "none", entries: func(*testing.T) []metav1.ManagedFieldsEntry { return nil }},
		{name: "the source's own apply", entries: func(t *testing.T) []metav1.ManagedFieldsEntry {
			return []metav1.ManagedFieldsEntry{entry(t, DefaultFieldManager, apply, `{"f:status":{"f:phase":{}}}`)}
		}},
		{name: "an update under the source's name is another manager", entries: func(t *testing.T) []metav1.ManagedFieldsEntry {
			return []metav1.ManagedFieldsEntry{entry(t, DefaultFieldManager, update, `{"f:status":{"f:phase":{}}}`)}
		}, want: ".status.phase"},
		{name: "an atomic list", entries: func(t *testing.T) []metav1.ManagedFieldsEntry {
			return []metav1.ManagedFieldsEntry{entry(t, "numaplane-controller", update, `{"f:status":{"f:conditions":{}}}`)}
		}, want: ".status.conditions"},
		{name: "fields of a condition of a map list", entries: func(t *testing.T) []metav1.ManagedFieldsEntry {
			return []metav1.ManagedFieldsEntry{entry(t, "numaplane-controller", update, `{"f:status":{"f:conditions":{`+configuredKey+`:{"f:reason":{}}}}}`)}
		}, want: `.status.conditions[type="Configured"].reason`},
		{name: "the spec is not the status", entries: func(t *testing.T) []metav1.ManagedFieldsEntry {
			return []metav1.ManagedFieldsEntry{entry(t, "kubectl", apply, `{"f:spec":{"f:path":{}}}`)}
		}},
		{name: "an unreadable entry is left out, the others read", entries: func(t *testing.T) []metav1.ManagedFieldsEntry {
			broken := entry(t, "broken", update, `{}`)
			broken.FieldsType = "FieldsV9"
			return []metav1.ManagedFieldsEntry{broken, entry(t, "numaplane-controller", update, `{"f:status":{"f:message":{}}}`)}
		}, want: ".status.message", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			u.SetManagedFields(tc.entries(t))
			f, err := foreignFields(u, DefaultFieldManager, nil)
			assert.Equal(t, tc.err, err != nil, "%v", err)
			assert.Equal(t, tc.want, f.String())
		})
	}
}

var t0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

// mine is a status as the source writes it.
func mine() Status {
	return Status{Phase: PhaseRunning, Message: "applied c1",
		Conditions: []metav1.Condition{
			{Type: ConditionConfigured, Status: metav1.ConditionTrue, Reason: "Watched", Message: "watched", LastTransitionTime: t0},
			{Type: ConditionSynced, Status: metav1.ConditionTrue, Reason: "Synced", Message: "applied c1", LastTransitionTime: t0},
		},
		CommitStatus: &CommitStatus{Hash: "c1", Synced: true, SyncTime: t0}}
}

const (
	configuredJSON = `{"type":"Configured","status":"True","reason":"Watched","message":"watched","lastTransitionTime":"2026-01-01T00:00:00Z"}`
	syncedJSON     = `{"type":"Synced","status":"True","reason":"Synced","message":"applied c1","lastTransitionTime":"2026-01-01T00:00:00Z"}`
	commitJSON     = `{"hash":"c1","synced":true,"syncTime":"2026-01-01T00:00:00Z"}`
)

func TestStripLeavesOutWhatAnotherManagerOwns(t *testing.T) {
	for _, tc := range []struct{ name, foreign, want string }{
		{"nothing", `{}`,
			`{"phase":"Running","message":"applied c1","conditions":[` + configuredJSON + `,` + syncedJSON + `],"commitStatus":` + commitJSON + `}`},
		{"the phase", `{"f:status":{"f:phase":{}}}`,
			`{"message":"applied c1","conditions":[` + configuredJSON + `,` + syncedJSON + `],"commitStatus":` + commitJSON + `}`},
		{"an atomic list: all of it", `{"f:status":{"f:conditions":{}}}`,
			`{"phase":"Running","message":"applied c1","commitStatus":` + commitJSON + `}`},
		{"a condition of a map list, by its key", `{"f:status":{"f:conditions":{` + configuredKey + `:{".":{},"f:type":{},"f:reason":{}}}}}`,
			`{"phase":"Running","message":"applied c1","conditions":[` + syncedJSON + `],"commitStatus":` + commitJSON + `}`},
		{"fields of a condition whose key is the source's", `{"f:status":{"f:conditions":{` + configuredKey + `:{"f:reason":{},"f:message":{}}}}}`,
			`{"phase":"Running","message":"applied c1","conditions":[{"type":"Configured","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z"},` + syncedJSON + `],"commitStatus":` + commitJSON + `}`},
		{"every condition", `{"f:status":{"f:conditions":{` + configuredKey + `:{"f:type":{}},` + syncedKey + `:{"f:type":{}}}}}`,
			`{"phase":"Running","message":"applied c1","commitStatus":` + commitJSON + `}`},
		{"items named by index: the list", `{"f:status":{"f:conditions":{"i:0":{"f:reason":{}}}}}`,
			`{"phase":"Running","message":"applied c1","commitStatus":` + commitJSON + `}`},
		{"a field of commitStatus: all of it, a record of one sync", `{"f:status":{"f:commitStatus":{"f:hash":{}}}}`,
			`{"phase":"Running","message":"applied c1","conditions":[` + configuredJSON + `,` + syncedJSON + `]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := foreignOf(t, tc.foreign).Strip(mine())
			require.NoError(t, err)
			data, err := json.Marshal(got)
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(data))
		})
	}
	got, err := ForeignFields{}.Strip(mine())
	require.NoError(t, err)
	assert.Len(t, got, 4, "the zero value holds none")
}

func TestMutationsStartFromTheOthersValues(t *testing.T) {
	theirs := Status{Phase: PhasePending, Message: "reconciled",
		Conditions:   []metav1.Condition{{Type: ConditionConfigured, Status: metav1.ConditionTrue, Reason: "Successful", Message: "Successful", LastTransitionTime: t0}},
		CommitStatus: &CommitStatus{Hash: "c0", SyncTime: t0}}
	for _, tc := range []struct {
		name, foreign string
		want          func(s *Status)
	}{
		{"nothing", `{}`, func(*Status) {}},
		{"the phase", `{"f:status":{"f:phase":{}}}`, func(s *Status) { s.Phase = PhasePending }},
		{"the message", `{"f:status":{"f:message":{}}}`, func(s *Status) { s.Message = "reconciled" }},
		{"a field of commitStatus", `{"f:status":{"f:commitStatus":{"f:hash":{}}}}`, func(s *Status) { s.CommitStatus = theirs.CommitStatus }},
		{"an atomic list", `{"f:status":{"f:conditions":{}}}`, func(s *Status) { s.Conditions = theirs.Conditions }},
		{"a condition by type", `{"f:status":{"f:conditions":{` + configuredKey + `:{"f:reason":{}}}}}`,
			func(s *Status) { s.Conditions[0] = theirs.Conditions[0] }},
		{"a condition they do not have", `{"f:status":{"f:conditions":{` + syncedKey + `:{"f:reason":{}}}}}`,
			func(s *Status) { s.Conditions = s.Conditions[:1] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := mine()
			tc.want(&want)
			assert.Equal(t, want, foreignOf(t, tc.foreign).overlay(mine(), theirs))
		})
	}
}

func conflict(fields ...string) error {
	var causes []metav1.StatusCause
	for _, f := range fields {
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "numaplane-controller"`, Field: f})
	}
	return apierrors.NewApplyConflict(causes, "Apply failed")
}

func TestAConflictNamesTheFieldsToLeaveOut(t *testing.T) {
	gr := schema.GroupResource{Group: GVR.Group, Resource: GVR.Resource}
	for _, tc := range []struct {
		name string
		err  error
		want string // "": not a conflict that names a field
	}{
		{"a field", conflict(".status.phase"), ".status.phase"},
		{"wrapped", fmt.Errorf("write: %w", conflict(".status.message")), ".status.message"},
		{"an atomic list", conflict(".status.conditions"), ".status.conditions"},
		{"fields of a condition", conflict(`.status.conditions[type="Configured"].reason`, `.status.conditions[type="Configured"].message`),
			`.status.conditions[type="Configured"].message, .status.conditions[type="Configured"].reason`},
		{"a part of a field the source does not know: the field", conflict(".status.commitStatus.extra"), ".status.commitStatus"},
		{"a field the source does not write", conflict(".status.observedGeneration"), ""},
		{"a conflict of versions", apierrors.NewConflict(gr, "web", errors.New("the object has been modified")), ""},
		{"another error", errors.New("connection refused"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ForeignFields{}.with(tc.err, mine())
			assert.Equal(t, tc.want != "", ok)
			assert.Equal(t, tc.want, got.String())
		})
	}
}

// writes records what a StatusWriter was asked to write, and answers with
// the errors it is given, in turn.
type writes struct {
	sent    []map[string]any
	answers []error
}

func (w *writes) WriteStatus(_ context.Context, _, _ string, s Status, foreign ForeignFields) error {
	u, err := foreign.Strip(s)
	if err != nil {
		return err
	}
	w.sent = append(w.sent, u)
	if len(w.answers) == 0 {
		return nil
	}
	err, w.answers = w.answers[0], w.answers[1:]
	return err
}

// cachedSource is a source whose cache holds obj, writing through w.
func cachedSource(t *testing.T, w StatusWriter, obj *unstructured.Unstructured) *Source {
	t.Helper()
	s := New(nil, Config{StatusWriter: w})
	s.store = cache.NewStore(cache.MetaNamespaceKeyFunc)
	require.NoError(t, s.store.Add(obj))
	return s
}

func gitSync(status map[string]any, managed ...metav1.ManagedFieldsEntry) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "GitSync",
		"metadata": map[string]any{"name": "web", "namespace": "apps", "uid": "u1", "resourceVersion": "7"},
		"status":   status,
	}}
	u.SetManagedFields(managed)
	return u
}

// The cache has no managedFields (a program stripped them) and another
// manager owns the phase: the apply, not forced, is refused; the source
// writes the rest at once, remembers the phase as not written, and does
// not try it again while the cache says nothing new.
func TestAConflictLeavesTheFieldOutAndIsRemembered(t *testing.T) {
	w := &writes{answers: []error{conflict(".status.phase")}}
	s := cachedSource(t, w, gitSync(map[string]any{"phase": "Pending"}))
	ctx := context.Background()
	require.NoError(t, s.writeStatus(ctx, "apps/web", []mutation{accepted(1), synced(1, "c1", "applied c1")}))
	require.Len(t, w.sent, 2, "tried again at once")
	assert.Equal(t, "Running", w.sent[0]["phase"])
	assert.NotContains(t, w.sent[1], "phase")
	assert.Contains(t, w.sent[1], "commitStatus")
	assert.Empty(t, s.written["apps/web"].status.Phase, "what was written")

	require.NoError(t, s.writeStatus(ctx, "apps/web", []mutation{failed(1, "c2", "ApplyFailed", errors.New("refused"))}))
	require.Len(t, w.sent, 3, "no conflict again")
	assert.NotContains(t, w.sent[2], "phase")
	assert.Equal(t, "refused", w.sent[2]["message"])
}

// A second conflict, on the write without the first's fields, is an
// error: the write is tried again later, and nothing is remembered as
// written.
func TestAConflictOnTheRetryIsAnError(t *testing.T) {
	w := &writes{answers: []error{conflict(".status.phase"), conflict(".status.message")}}
	s := cachedSource(t, w, gitSync(nil))
	err := s.writeStatus(context.Background(), "apps/web", []mutation{synced(1, "c1", "applied c1")})
	require.Error(t, err)
	assert.True(t, apierrors.IsConflict(err), "%v", err)
	assert.Len(t, w.sent, 2)
	assert.NotContains(t, s.written, "apps/web")
}

// When nobody else owns a field of the status, the source writes the
// whole of it, as it always has; when another manager's entry cannot be
// read, the readable ones are still honoured.
func TestManagedFieldsDecideWhatIsWritten(t *testing.T) {
	own := entry(t, DefaultFieldManager, metav1.ManagedFieldsOperationApply, `{"f:status":{"f:phase":{},"f:message":{},"f:conditions":{}}}`)
	w := &writes{}
	s := cachedSource(t, w, gitSync(map[string]any{"phase": "Pending"}, own))
	require.NoError(t, s.writeStatus(context.Background(), "apps/web", []mutation{accepted(1), synced(1, "c1", "applied c1")}))
	require.Len(t, w.sent, 1)
	assert.Equal(t, []string{"commitStatus", "conditions", "message", "phase"}, keys(w.sent[0]))
	assert.Len(t, w.sent[0]["conditions"], 2)

	broken := entry(t, "broken", metav1.ManagedFieldsOperationUpdate, `{}`)
	broken.FieldsType = "FieldsV9"
	theirs := entry(t, "numaplane-controller", metav1.ManagedFieldsOperationUpdate, `{"f:status":{"f:conditions":{}}}`)
	w = &writes{}
	s = cachedSource(t, w, gitSync(nil, own, broken, theirs))
	require.NoError(t, s.writeStatus(context.Background(), "apps/web", []mutation{accepted(1), synced(1, "c1", "applied c1")}))
	require.Len(t, w.sent, 1)
	assert.Equal(t, []string{"commitStatus", "message", "phase"}, keys(w.sent[0]))
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The fields of a manager Config.TakeOver names are not foreign, and a
// write that sends any of them is forced on the version they were read
// from; one that sends none of them is not. Another manager's field that
// a taken-over one shares stays another's, never sent.
func TestTakeOverForcesOnlyOverItsManagersFields(t *testing.T) {
	update := metav1.ManagedFieldsOperationUpdate
	u := &unstructured.Unstructured{}
	u.SetResourceVersion("42")
	u.SetManagedFields([]metav1.ManagedFieldsEntry{
		entry(t, "manager", update, `{"f:status":{"f:commitStatus":{"f:hash":{},"f:synced":{}},"f:phase":{},"f:message":{}}}`),
		entry(t, "numaplane-reconciler", update, `{"f:status":{"f:message":{}}}`),
	})
	f, err := foreignFields(u, DefaultFieldManager, []string{"manager"})
	require.NoError(t, err)
	assert.Equal(t, ".status.message", f.String(), "the reconciler's, shared or not, stays its own")

	s := mine()
	rv, force := f.TakeOver(s)
	assert.True(t, force, "commitStatus and phase were the program's previous self's")
	assert.Equal(t, "42", rv)
	sent, err := f.Strip(s)
	require.NoError(t, err)
	assert.NotContains(t, sent, "message", "never sent, forced or not")
	assert.Contains(t, sent, "commitStatus")

	_, force = f.TakeOver(Status{Conditions: s.Conditions})
	assert.False(t, force, "nothing of the taken-over manager's is sent")

	without, err := foreignFields(u, DefaultFieldManager, nil)
	require.NoError(t, err)
	_, force = without.TakeOver(s)
	assert.False(t, force, "no TakeOver: never forced")
	assert.Contains(t, without.String(), ".status.commitStatus", "and the previous self's fields are foreign")

	more := f.union(without)
	rv, force = more.TakeOver(Status{Phase: PhaseRunning})
	assert.False(t, force, "what a conflict or an earlier write left foreign is not taken: %s", rv)
}

// A TakeOver manager that still owns the maps (commitStatus, a condition
// of a map list) as such once its fields were taken forces nothing: a
// map owned as a whole is no conflict.
func TestTakeOverDoesNotForceForTheMapsLeft(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetResourceVersion("1")
	u.SetManagedFields([]metav1.ManagedFieldsEntry{entry(t, "manager", metav1.ManagedFieldsOperationUpdate,
		`{"f:status":{"f:commitStatus":{".":{}},"f:conditions":{`+syncedKey+`:{".":{}}}}}`)})
	f, err := foreignFields(u, DefaultFieldManager, []string{"manager"})
	require.NoError(t, err)
	_, force := f.TakeOver(mine())
	assert.False(t, force)

	u.SetManagedFields([]metav1.ManagedFieldsEntry{entry(t, "manager", metav1.ManagedFieldsOperationUpdate,
		`{"f:status":{"f:commitStatus":{".":{},"f:hash":{}}}}`)})
	f, err = foreignFields(u, DefaultFieldManager, []string{"manager"})
	require.NoError(t, err)
	_, force = f.TakeOver(mine())
	assert.True(t, force, "a field of it still is")
}

// Without the version its fields were read from, nothing is forced.
func TestTakeOverWithoutAVersionForcesNothing(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetManagedFields([]metav1.ManagedFieldsEntry{entry(t, "manager", metav1.ManagedFieldsOperationUpdate, `{"f:status":{"f:phase":{}}}`)})
	f, err := foreignFields(u, DefaultFieldManager, []string{"manager"})
	require.NoError(t, err)
	_, force := f.TakeOver(mine())
	assert.False(t, force)
	u.SetResourceVersion("7")
	f, err = foreignFields(u, DefaultFieldManager, []string{"manager"})
	require.NoError(t, err)
	rv, force := f.TakeOver(mine())
	assert.True(t, force)
	assert.Equal(t, "7", rv)
}
