package watcher

import (
	"fmt"
	"time"

	"github.com/modwatch/modwatch/gitutil"
)

// EventType is what an Event reports.
type EventType string

// The events a watcher reports.
const (
	// EventInvalidTarget: a source gave a target that failed validation; it
	// is not watched.
	EventInvalidTarget EventType = "InvalidTarget"
	// EventPolled: one poll of a remote ended (Err says whether it failed).
	// Target is nil.
	EventPolled EventType = "Polled"
	// EventRateLimited: a host answered that it limits the watcher (Err
	// is a *gitutil.RateLimitError, with its host and end); no request
	// goes to it until then. Once an episode, whichever remote it
	// answered; Target is nil.
	EventRateLimited EventType = "RateLimited"
	// EventListed: the remote's refs were listed (Err on failure). Target
	// is nil.
	EventListed EventType = "Listed"
	// EventFetched: objects were fetched into a remote's mirror (Err on
	// failure). Target is nil.
	EventFetched EventType = "Fetched"
	// EventMirrorRebuilt: a remote's mirror was rebuilt; Err says why.
	EventMirrorRebuilt EventType = "MirrorRebuilt"
	// EventTargetFailed: the target could not be brought to a commit: the
	// remote failed, the revision does not resolve, the path is missing, the
	// credentials could not be found. Nothing was delivered; the target is
	// tried again on the next poll.
	EventTargetFailed EventType = "TargetFailed"
	// EventRefVanished: the ref a target resolved to before is gone from
	// the remote. The last delivery stays in place.
	EventRefVanished EventType = "RefVanished"
	// EventSuspended: the target is suspended ([Target.Suspend]) and
	// resolved to Commit, which is not handed to its sinks.
	EventSuspended EventType = "Suspended"
	// EventTargetRecovered: the target, failing before (EventTargetFailed,
	// EventRefVanished) or not watched (EventInvalidTarget), was brought to
	// Commit again; once a recovery. It says nothing of its sinks: each is
	// offered Commit again, and says what it has (EventUpToDate,
	// EventDelivered), which is what an observer that said the failure on
	// an object reads to end it.
	EventTargetRecovered EventType = "TargetRecovered"
	// EventUpToDate: the target resolved to a commit whose tree at Path is
	// what the sink has; the checkpoint records the commit (or had it:
	// the first poll after a start, a target offered again after it
	// recovered), nothing is delivered.
	EventUpToDate EventType = "UpToDate"
	// EventDelivered: a sink accepted Change.
	EventDelivered EventType = "Delivered"
	// EventDeliveryFailed: a sink returned Err for Change; Attempt counts the
	// failures of this delivery so far.
	EventDeliveryFailed EventType = "DeliveryFailed"
	// EventSubmodulesLeftOut: the tree about to be delivered has
	// submodules, which it does not hold (Change.Submodules names them).
	// The delivery goes on.
	EventSubmodulesLeftOut EventType = "SubmodulesLeftOut"
	// EventRemoved: the target disappeared and the sink was told (Err on
	// failure of Remove).
	EventRemoved EventType = "Removed"
	// EventForgotten: the target left its set while suspended; its sink
	// let go of it ([Forgetter]) and what it applied stays. Err on failure.
	EventForgotten EventType = "Forgotten"
	// EventRemovalsHeld: a decision to remove more targets at once than the
	// deletion budget allows was held (Err says which and why; see
	// [WithRemovalBudget]). Target is nil.
	EventRemovalsHeld EventType = "RemovalsHeld"
	// EventNoSet: a source cannot give its set now (Err says why; see
	// [NoSet]). Its last set stays and nothing is removed. Target is nil.
	EventNoSet EventType = "NoSet"
)

// Event is one outcome, reported to observers.
type Event struct {
	Type EventType
	Time time.Time
	// Remote is the repository URL, redacted.
	Remote string
	// Target is the target concerned, nil for remote-wide events.
	Target *Target
	// Sink is the sink's name, for delivery events.
	Sink string
	// Ref and Commit are what the target resolved to, when known (Commit
	// is zero otherwise).
	Ref    string
	Commit gitutil.Hash
	// Change is the change handed to the sink, for delivery events, as a
	// record: its FS and Root are nil. An event is a value an observer may
	// keep (as a client-go event handler keeps an object, not a handle on
	// the cluster); a tree kept would keep its packs on disk, and an
	// observer, called after Deliver returned, would read it when the
	// sink is done with it. What the sink read is for the sink to report
	// ([Reporter], Result).
	Change *Change
	// Attempt counts failures of the same delivery.
	Attempt int
	// Duration is how long the listing, poll, fetch or delivery took.
	Duration time.Duration
	// Waited is how long a listing or a fetch waited for its turn at its
	// host (see [HostBudget]).
	Waited time.Duration
	// Seen is when the watcher first saw Commit for the target, for
	// delivery events; Time minus Seen is the delivery lag.
	Seen time.Time
	// Result is what a [Reporter] sink said the delivery did, for delivery
	// events of such sinks (for instance *apply.Result); nil otherwise.
	Result any
	// Err is the failure, if any. It never contains a secret.
	Err error
}

// String is a one-line summary for logs and test failures.
func (e Event) String() string {
	s := string(e.Type)
	if e.Target != nil {
		s += " target=" + e.Target.ID
	}
	if e.Sink != "" {
		s += " sink=" + e.Sink
	}
	if e.Remote != "" {
		s += " remote=" + e.Remote
	}
	if !e.Commit.IsZero() {
		s += " commit=" + short(e.Commit)
	}
	if e.Change != nil {
		s += fmt.Sprintf(" reason=%s", e.Change.Reason)
	}
	if e.Err != nil {
		s += " err=" + e.Err.Error()
	}
	return s
}

// short is commit's text abbreviated, for logs.
func short(commit gitutil.Hash) string { return commit.String()[:12] }

// Observer hears each outcome: this is how status write-back, metrics and
// events are built without sinks knowing about each other.
type Observer interface {
	// Observe is called synchronously from the watcher's goroutines, in
	// order for any one target and sink; it must be quick and safe for
	// concurrent use.
	Observe(e Event)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(e Event)

// Observe calls f.
func (f ObserverFunc) Observe(e Event) { f(e) }
