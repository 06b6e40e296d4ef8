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

// allowRemoval decides whether a decision to remove goes ahead. The
// caller holds w.mu. The decision, named key, removes ids (sorted) of all
// targets; it goes ahead within the budget, or held and made again (ids the same, or fewer of them) after the
// confirmation delay or a confirmation, while its source has a set
// (ready). The budget counts the removals carried out under key within
// the delay too: one target at a time is no way around it. A decision over
// the budget seen for the first time is recorded, and an event returned to
// emit once w.mu is let go; the watcher looks again when the delay ends.
func (w *Watcher) allowRemoval(key string, ids []string, all int, ready bool) (bool, *Event) {
	if len(ids) == 0 {
		delete(w.held, key)
		return true, nil
	}
	now := time.Now()
	recent := w.recentRemovals(key, now)
	h := w.held[key]
	if h != nil && isSubset(ids, h.ids) {
		// Part of what is held, however small: held with it (giving some
		// targets back does not release the others).
		h.ids = ids
		if ready && (!h.since.After(w.confirmed) || now.Sub(h.since) >= w.opts.removals.confirm) {
			delete(w.held, key)
			w.noteRemovals(key, len(ids), now)
			return true, nil
		}
		return false, nil
	}
	if !w.opts.removals.over(len(ids)+recent, all+recent) {
		delete(w.held, key)
		w.noteRemovals(key, len(ids), now)
		return true, nil
	}
	w.held[key] = &heldRemoval{ids: ids, since: now}
	time.AfterFunc(w.opts.removals.confirm, w.poke)
	err := fmt.Errorf("%s would remove %d of %d targets (%s; %d more removed in the last %s): over the deletion budget of %.0f%%; held until the same decision is made again after %s, or confirmed",
		key, len(ids), all, abbreviate(ids, 5), recent, w.opts.removals.confirm, w.opts.removals.share*100, w.opts.removals.confirm)
	return false, &Event{Type: EventRemovalsHeld, Err: err}
}

// recentRemovals counts the removals carried out under key within the
// confirmation delay before now, and forgets older ones.
func (w *Watcher) recentRemovals(key string, now time.Time) int {
	times := w.removedAt[key]
	for len(times) > 0 && now.Sub(times[0]) >= w.opts.removals.confirm {
		times = times[1:]
	}
	if len(times) == 0 {
		delete(w.removedAt, key)
	} else {
		w.removedAt[key] = times
	}
	return len(times)
}

// noteRemovals records n removals carried out under key at now.
func (w *Watcher) noteRemovals(key string, n int, now time.Time) {
	if n == 0 || w.opts.removals.share >= 1 {
		return
	}
	for range n {
		w.removedAt[key] = append(w.removedAt[key], now)
	}
}

// isSubset reports whether every one of a (sorted) is in b (sorted).
func isSubset(a, b []string) bool {
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			return false
		}
	}
	return true
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
