package gitsync

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Attacks on Config.TakeOver's logic: what is forced, and over what.

const oldSelf = "old-controller"

func objWith(rv string, entries ...metav1.ManagedFieldsEntry) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetResourceVersion(rv)
	u.SetManagedFields(entries)
	return u
}

// Another manager's entry the source cannot read (a fieldsType it does not
// know) may own any field: a forced write would take it without the
// conflict that names it. Nothing is forced while one is there.
func TestAttackTakeOverNotForcedOverAnUnreadableEntry(t *testing.T) {
	unreadable := entry(t, "numaplane-controller", metav1.ManagedFieldsOperationUpdate, `{"f:status":{"f:message":{}}}`)
	unreadable.FieldsType = "FieldsV2"
	obj := objWith("7", entry(t, oldSelf, metav1.ManagedFieldsOperationUpdate, `{"f:status":{"f:phase":{}}}`), unreadable)
	f, err := foreignFields(obj, DefaultFieldManager, []string{oldSelf})
	require.Error(t, err)
	_, force := f.TakeOver(Status{Phase: PhaseRunning, Message: "applied"})
	assert.False(t, force, "forced over an entry the source could not read")
}

// A field two managers own (the same value applied by both), one named:
// it is the other's too, left out, and nothing is forced for it.
func TestAttackTakeOverASharedFieldIsNotTaken(t *testing.T) {
	obj := objWith("7",
		entry(t, oldSelf, metav1.ManagedFieldsOperationApply, `{"f:status":{"f:phase":{},"f:commitStatus":{"f:error":{},"f:hash":{}}}}`),
		entry(t, "numaplane-controller", metav1.ManagedFieldsOperationApply, `{"f:status":{"f:phase":{},"f:commitStatus":{"f:error":{}}}}`))
	f, err := foreignFields(obj, DefaultFieldManager, []string{oldSelf})
	require.NoError(t, err)
	s := Status{Phase: PhaseRunning, CommitStatus: &CommitStatus{Hash: "c1", Synced: true}}
	u, err := f.Strip(s)
	require.NoError(t, err)
	assert.NotContains(t, u, "phase")
	assert.NotContains(t, u, "commitStatus")
	_, force := f.TakeOver(s)
	assert.False(t, force)
}

// The source's own FieldManager named in TakeOver (its fields written by an
// update before): its apply entry stays its own, its update's are taken;
// "" names no manager but one whose name is "" (none of a client's).
func TestAttackTakeOverItsOwnNameAndTheEmptyName(t *testing.T) {
	own := entry(t, DefaultFieldManager, metav1.ManagedFieldsOperationApply, `{"f:status":{"f:phase":{}}}`)
	upd := entry(t, DefaultFieldManager, metav1.ManagedFieldsOperationUpdate, `{"f:status":{"f:message":{}}}`)
	f, err := foreignFields(objWith("7", own, upd), DefaultFieldManager, []string{DefaultFieldManager, ""})
	require.NoError(t, err)
	assert.Empty(t, f.String())
	rv, force := f.TakeOver(Status{Phase: PhaseRunning, Message: "applied"})
	assert.True(t, force)
	assert.Equal(t, "7", rv)
	_, force = f.TakeOver(Status{Phase: PhaseRunning})
	assert.False(t, force, "the source's own apply needs no force")
}
