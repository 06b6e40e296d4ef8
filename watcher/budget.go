package watcher

import (
	"time"
)

// DefaultRemovalShare and DefaultRemovalConfirm are the deletion budget a
// watcher has unless [WithRemovalBudget] says otherwise.
const (
	DefaultRemovalShare   = 0.5
	DefaultRemovalConfirm = 5 * time.Minute
)

// WithRemovalBudget sets the watcher's deletion budget. One decision to
// remove more than share of a route's targets (at least two of them) — a
// source's new set without them, or the sweep at start finding them in an
// inventory and in no source's set — is held: nothing of it is removed,
// it is reported ([EventRemovalsHeld], [Stats.RemovalsHeld]), and it is
// carried out only when the same decision (or part of it) is made again
// confirm after it was first held, while the source has a set, or when
// the program confirms it ([Watcher.ConfirmRemovals]). The share is of
// the route's targets before the decision, and counts the removals
// carried out in the last confirm too: removing one target at a time, or
// renaming every target, is held as removing them at once. A decision
// with more targets is a new one; giving some back keeps the rest held.
// Default: half, five minutes. A share of 1 or more turns it off.
func WithRemovalBudget(share float64, confirm time.Duration) Option {
	return func(o *options) { o.removals = removalBudget{share: share, confirm: max(confirm, 0)} }
}

// removalBudget is what WithRemovalBudget set.
type removalBudget struct {
	share   float64
	confirm time.Duration
}

// ConfirmRemovals carries out every removal the deletion budget holds now
// (see [WithRemovalBudget]): an operator's explicit override.
func (w *Watcher) ConfirmRemovals() {
	w.mu.Lock()
	w.removals.Confirm(time.Now())
	w.mu.Unlock()
	w.poke()
}

// poke asks the reconcile loop for a pass.
func (w *Watcher) poke() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// allowRemoval asks the deletion budget whether the decision named key
// goes ahead (see budget.Budget.Allow); the caller holds w.mu. A decision
// held for the first time is returned as an event to emit once w.mu is
// let go, and the watcher looks again when the budget's delay ends.
func (w *Watcher) allowRemoval(key string, ids []string, all int, ready bool) (bool, *Event) {
	ok, held := w.removals.Allow(key, ids, all, ready, time.Now())
	if held == nil {
		return ok, nil
	}
	time.AfterFunc(w.removals.Delay(), w.poke)
	return false, &Event{Type: EventRemovalsHeld, Err: held}
}
