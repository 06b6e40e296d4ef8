package watcher

import (
	"context"
	"errors"
	"fmt"
)

// NotWatched is a target a source names but cannot watch, for err: its
// spec is invalid, the program refused it, a Secret it needs cannot be
// read. Named, it is wanted: nothing its sinks hold for it is removed,
// neither while the watcher runs nor by the sweep at start. It is
// reported as an invalid target (EventInvalidTarget with err, counted in
// Stats.Invalid) and not polled until the source gives it whole again.
func NotWatched(id string, err error) Target {
	if err == nil {
		err = errors.New("not watched")
	}
	return Target{ID: id, Payload: notWatched{err: err}}
}

// Refused is [NotWatched] of t's ID, keeping t's Payload, which observers
// of its EventInvalidTarget read with [Target.RefusedPayload]: so that a
// sink can say why on the object the target stands for.
func Refused(t Target, err error) Target {
	nw := NotWatched(t.ID, err)
	nw.Payload = notWatched{err: nw.Payload.(notWatched).err, payload: t.Payload}
	return nw
}

// notWatched is the Payload of a target NotWatched made.
type notWatched struct {
	err     error
	payload any // Refused's
}

// RefusedPayload returns the Payload of the target its source refused
// ([Refused]); nil for any other target.
func (t Target) RefusedPayload() any {
	if nw, ok := t.Payload.(notWatched); ok {
		return nw.payload
	}
	return nil
}

// Unwatched returns the reason t's source gave for not watching it
// ([NotWatched]); nil for a target to watch.
func (t Target) Unwatched() error {
	if nw, ok := t.Payload.(notWatched); ok {
		return nw.err
	}
	return nil
}

// noSetKey is the key of a source's reporter in the ctx its Run is given.
type noSetKey struct{}

// NoSet says that a [Source] cannot give its set now. The source calls
// it with the ctx its Run was given, with why: its file is missing, unreadable or invalid, its
// informer cannot list (or is forbidden to), a lookup it needs failed. Not
// being able to read the desired set is never an empty set: the watcher
// keeps the set the source gave last (none before its first, and then
// removes nothing at start either), and reports err to observers
// ([EventNoSet]) and in [Stats.NoSet] until the source gives a set again.
// Calling it with another ctx does nothing.
func NoSet(ctx context.Context, err error) {
	if report, ok := ctx.Value(noSetKey{}).(func(error)); ok && err != nil {
		report(err)
	}
}

// WithNoSetReporter returns a ctx for a Source's Run in which [NoSet]
// calls report: for what runs a Source itself (a test of a source, a
// source that wraps others). The watcher gives each source's Run its own.
func WithNoSetReporter(ctx context.Context, report func(error)) context.Context {
	return context.WithValue(ctx, noSetKey{}, report)
}

// noSet records that the source of r cannot give its set now. Each new
// reason is logged and reported once.
func (w *Watcher) noSet(r *route, err error) {
	w.mu.Lock()
	same := r.noSet != nil && r.noSet.Error() == err.Error()
	r.noSet = err
	kept := len(r.targets)
	synced := r.synced
	w.mu.Unlock()
	if same {
		return
	}
	err = fmt.Errorf("route %d: %w", r.idx, err)
	if synced {
		w.log.Error(err, "a source cannot give its set: the last one it gave stays, nothing is removed", "targets", kept)
	} else {
		w.log.Error(err, "a source cannot give its first set: nothing is delivered or removed for it until it does")
	}
	w.emit(Event{Type: EventNoSet, Err: err})
}
