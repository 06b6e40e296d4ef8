package gitsync

import (
	"fmt"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// The phases of a GitSync.
const (
	PhasePending       = "Pending"
	PhaseRunning       = "Running"
	PhaseFailed        = "Failed"
	PhaseNotApplicable = "NotApplicable"
)

// The conditions the status carries.
const (
	// ConditionConfigured: the spec is valid and watched.
	ConditionConfigured = "Configured"
	// ConditionSynced: the last commit seen is applied.
	ConditionSynced = "Synced"
)

// Status is a GitSync's status, with the fields of Numaplane's schema and
// no other (the generation a condition was set for is in the condition).
type Status struct {
	Phase        string             `json:"phase,omitempty"`
	Message      string             `json:"message,omitempty"`
	Conditions   []metav1.Condition `json:"conditions,omitempty"`
	CommitStatus *CommitStatus      `json:"commitStatus,omitempty"`
}

// CommitStatus says which commit was synced, when it was last tried and
// how it went; Numaplane's schema requires Hash (empty when no commit is
// known), SyncTime and Synced.
type CommitStatus struct {
	Hash     string      `json:"hash"`
	Synced   bool        `json:"synced"`
	SyncTime metav1.Time `json:"syncTime"`
	Error    string      `json:"error,omitempty"`
}

// StatusFields says which fields of a GitSync's status the source writes;
// the others belong to another writer (the embedding controller's
// reconciler), whose values the source never changes. In every mode, a
// field of those that another field manager owns is left to it too
// ([ForeignFields]).
type StatusFields int

const (
	// StatusAll: phase, message, conditions (Configured, Synced) and
	// commitStatus. On Numaplane's CRD, whose conditions are an atomic
	// list, a reconciler that writes a condition owns the list: the
	// source's conditions are then not written, and phase, message and
	// commitStatus say how the last sync went (what Synced would).
	StatusAll StatusFields = iota
	// StatusCommit: commitStatus only, as Numaplane's own syncer does; its
	// reconciler writes phase, message and conditions.
	StatusCommit
	// StatusNone: nothing; the source only reads GitSyncs.
	StatusNone
)

// owned returns the part of s that fields says the source writes.
func (f StatusFields) owned(s Status) Status {
	if f == StatusCommit {
		return Status{CommitStatus: s.CommitStatus}
	}
	return s
}

// maxMessage bounds the messages written (the CRD allows 32768).
const maxMessage = 4096

func clip(s string) string {
	if len(s) > maxMessage {
		return s[:maxMessage-3] + "..."
	}
	return s
}

// mutation changes a status; now is the time it is applied.
type mutation func(s *Status, now time.Time)

func setCondition(s *Status, typ string, ok bool, reason, msg string, gen int64, now time.Time) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: typ, Status: st, Reason: reason, Message: clip(msg), ObservedGeneration: gen,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// invalid: the spec cannot be watched.
func invalid(gen int64, err error) mutation { return refused(gen, "InvalidSpec", err) }

// refused: the spec is not watched, for the reason given.
func refused(gen int64, reason string, err error) mutation {
	return func(s *Status, now time.Time) {
		s.Phase, s.Message = PhaseFailed, clip(err.Error())
		setCondition(s, ConditionConfigured, false, reason, err.Error(), gen, now)
	}
}

// notApplicable: the GitSync is for another cluster.
func notApplicable(gen int64, msg string) mutation {
	return func(s *Status, now time.Time) {
		s.Phase, s.Message = PhaseNotApplicable, msg
		setCondition(s, ConditionConfigured, false, "NotApplicable", msg, gen, now)
	}
}

// accepted: the spec is valid and watched; a GitSync that was not synced
// yet (or was invalid) is Pending.
func accepted(gen int64) mutation {
	return func(s *Status, now time.Time) {
		c := meta.FindStatusCondition(s.Conditions, ConditionConfigured)
		if s.Phase == "" || s.Phase == PhaseNotApplicable || (c != nil && c.Status == metav1.ConditionFalse) {
			s.Phase, s.Message = PhasePending, "waiting for the first sync"
		}
		setCondition(s, ConditionConfigured, true, "Watched", "the spec is valid and watched", gen, now)
	}
}

// synced: commit is applied (or its path did not change).
func synced(gen int64, commit, msg string) mutation {
	return func(s *Status, now time.Time) {
		s.Phase, s.Message = PhaseRunning, clip(msg)
		if s.CommitStatus == nil || s.CommitStatus.Hash != commit || !s.CommitStatus.Synced || s.CommitStatus.Error != "" {
			s.CommitStatus = &CommitStatus{Hash: commit, Synced: true, SyncTime: metav1.NewTime(now)}
		}
		setCondition(s, ConditionSynced, true, "Synced", msg, gen, now)
	}
}

// suspended: commit is not applied, as automated sync is disabled.
func suspended(gen int64, commit string) mutation {
	return func(s *Status, now time.Time) {
		msg := "automated sync is disabled: " + short(commit) + " is not applied"
		if cs := s.CommitStatus; cs != nil && cs.Hash == commit && cs.Synced {
			msg = "automated sync is disabled; " + short(commit) + ", the latest, is applied"
		}
		s.Message = msg
		setCondition(s, ConditionSynced, false, "Suspended", msg, gen, now)
	}
}

// failed: the commit (if known) could not be synced.
func failed(gen int64, commit, reason string, err error) mutation {
	return func(s *Status, now time.Time) {
		s.Phase, s.Message = PhaseFailed, clip(err.Error())
		cs := CommitStatus{Hash: commit, Error: clip(err.Error()), SyncTime: metav1.NewTime(now)}
		if commit == "" && s.CommitStatus != nil {
			cs.Hash = s.CommitStatus.Hash
		}
		if s.CommitStatus == nil || s.CommitStatus.Hash != cs.Hash || s.CommitStatus.Synced || s.CommitStatus.Error != cs.Error {
			s.CommitStatus = &cs
		}
		setCondition(s, ConditionSynced, false, reason, err.Error(), gen, now)
	}
}

// eventMutation turns a watcher event about a GitSync into a status
// mutation; ok is false for events that do not change the status.
func eventMutation(e watcher.Event) (m mutation, ok bool) {
	if e.Target == nil {
		return nil, false
	}
	r, _ := payload.Of[payload.Render](*e.Target)
	gen := r.Generation
	commit := "" // the status's text of e.Commit, "" when it has none
	if !e.Commit.IsZero() {
		commit = e.Commit.String()
	}
	switch e.Type {
	case watcher.EventDelivered:
		msg := "applied " + short(commit)
		if e.Result != nil {
			msg += ": " + fmt.Sprint(e.Result)
		}
		return synced(gen, commit, msg), true
	case watcher.EventUpToDate:
		return synced(gen, commit, "the path is unchanged at "+short(commit)), true
	case watcher.EventDeliveryFailed:
		return failed(gen, commit, "ApplyFailed", e.Err), true
	case watcher.EventTargetFailed:
		return failed(gen, commit, "SyncFailed", e.Err), true
	case watcher.EventInvalidTarget:
		if e.Target.Unwatched() != nil {
			return nil, false // named but not watched (watcher.NotWatched): the source wrote why
		}
		return invalid(gen, e.Err), true
	case watcher.EventSuspended:
		return suspended(gen, commit), true
	case watcher.EventRefVanished:
		return failed(gen, "", "RefVanished", fmt.Errorf("the revision's ref is gone from the repository; %s stays applied", short(commit))), true
	}
	return nil, false
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// decodeStatus reads the status of an object.
func decodeStatus(obj map[string]any) (Status, error) {
	var s Status
	raw, _ := obj["status"].(map[string]any)
	if raw == nil {
		return s, nil
	}
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &s)
	return s, err
}

// sameStatus compares two statuses without their times.
func sameStatus(a, b Status) bool {
	strip := func(s Status) Status {
		s.Conditions = append([]metav1.Condition(nil), s.Conditions...)
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		if s.CommitStatus != nil {
			cs := *s.CommitStatus
			cs.SyncTime = metav1.Time{}
			s.CommitStatus = &cs
		}
		return s
	}
	return apiequality.Semantic.DeepEqual(strip(a), strip(b))
}

// TargetID is the ID of the target of the GitSync namespace/name
// ("gitsync/<namespace>/<name>"), as events, metrics and checkpoints name
// it.
func TargetID(namespace, name string) string { return "gitsync/" + namespace + "/" + name }

// ParseTargetID is TargetID's inverse; ok is false for an ID that is not a
// GitSync's.
func ParseTargetID(id string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(id, "gitsync/")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, "/")
	return namespace, name, ok && name != "" && !strings.Contains(name, "/")
}
