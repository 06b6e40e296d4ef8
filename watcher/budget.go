package watcher

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// DefaultRemovalShare and DefaultRemovalConfirm are the deletion budget a
// watcher has unless [WithRemovalBudget] says otherwise.
const (
	DefaultRemovalShare   = 0.5
	DefaultRemovalConfirm = 5 * time.Minute
)

// WithRemovalBudget sets the watcher's deletion budget. One decision to
// remove more than share of a route's targets at once (at least two of
// them) — a source's new set without them, or the sweep at start finding
// them in an inventory and in no source's set — is held: nothing of it is
// removed, it is reported ([EventRemovalsHeld], [Stats.RemovalsHeld]), and
// it is carried out only when the same decision is made again confirm
// after it was first held, or when the program confirms it
// ([Watcher.ConfirmRemovals]). A decision that changes (a target comes
// back, another goes) is a new one. Default: half, five minutes. A share
// of 1 or more turns the budget off.
func WithRemovalBudget(share float64, confirm time.Duration) Option {
	return func(o *options) { o.removals = removalBudget{share: share, confirm: max(confirm, 0)} }
}

// removalBudget is what WithRemovalBudget set.
type removalBudget struct {
	share   float64
	confirm time.Duration
}

// over reports whether removing n of all targets is over the budget.
func (b removalBudget) over(n, all int) bool {
	return b.share < 1 && n >= 2 && float64(n) > b.share*float64(all)
}

// heldRemoval is one decision held: the IDs it removes, since when.
type heldRemoval struct {
	ids   []string
	since time.Time
}

// ConfirmRemovals carries out every removal the deletion budget holds now
// (see [WithRemovalBudget]): an operator's explicit override.
func (w *Watcher) ConfirmRemovals() {
	w.mu.Lock()
	w.confirmed = time.Now()
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

// allowRemoval decides, under w.mu, whether the decision named key to
// remove ids (sorted) of all targets goes ahead: within the budget, seen
// again after the confirmation delay, or confirmed. A decision over the
// budget seen for the first time is recorded, and an event returned to
// emit once w.mu is let go; the watcher looks again when the delay ends.
func (w *Watcher) allowRemoval(key string, ids []string, all int) (bool, *Event) {
	if !w.opts.removals.over(len(ids), all) {
		delete(w.held, key)
		return true, nil
	}
	h := w.held[key]
	now := time.Now()
	if h != nil && slices.Equal(h.ids, ids) {
		if !h.since.After(w.confirmed) || now.Sub(h.since) >= w.opts.removals.confirm {
			delete(w.held, key)
			return true, nil
		}
		return false, nil
	}
	w.held[key] = &heldRemoval{ids: ids, since: now}
	time.AfterFunc(w.opts.removals.confirm, w.poke)
	err := fmt.Errorf("%s would remove %d of %d targets (%s): over the deletion budget of %.0f%%; held until the same decision is made again after %s, or confirmed",
		key, len(ids), all, abbreviate(ids, 5), w.opts.removals.share*100, w.opts.removals.confirm)
	return false, &Event{Type: EventRemovalsHeld, Err: err}
}

// forgetHeld drops the held decisions not made again in this pass (seen:
// the keys decided on).
func (w *Watcher) forgetHeld(seen map[string]bool, prefix string) {
	for key := range w.held {
		if strings.HasPrefix(key, prefix) && !seen[key] {
			delete(w.held, key)
		}
	}
}

// heldCount is how many removals are held now; the caller holds w.mu.
func (w *Watcher) heldCount() int {
	n := 0
	for _, h := range w.held {
		n += len(h.ids)
	}
	return n
}

// abbreviate lists the first n of ids, and how many more.
func abbreviate(ids []string, n int) string {
	if len(ids) <= n {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:n], ", "), len(ids)-n)
}
