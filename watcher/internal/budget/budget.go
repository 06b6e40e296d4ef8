package budget

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Budget holds the removals over its share; its zero value is not
// usable: see New. It is not safe for concurrent use (the watcher calls it
// under its lock).
type Budget struct {
	share   float64
	confirm time.Duration

	held      map[string]*decision   // the decisions held, by key
	removedAt map[string][]time.Time // removals carried out, by key, within confirm
	confirmed time.Time              // what was held before is carried out (Confirm)
}

// decision is one decision held: the IDs it removes, since when.
type decision struct {
	ids   []string
	since time.Time
}

// New returns a budget that holds a decision to remove more than share of
// a route's targets (at least two) until it is made again confirm after
// it was first held; a share of 1 or more holds nothing.
func New(share float64, confirm time.Duration) *Budget {
	return &Budget{share: share, confirm: max(confirm, 0), held: map[string]*decision{}, removedAt: map[string][]time.Time{}}
}

// over reports whether removing n of all targets is over the budget.
func (b *Budget) over(n, all int) bool {
	return b.share < 1 && n >= 2 && float64(n) > b.share*float64(all)
}

// Allow decides whether a decision to remove goes ahead at now. The
// decision, named key, removes ids (sorted) of all targets; it goes ahead
// within the budget, or held and made again (ids the same, or fewer of
// them) after the confirmation delay or a confirmation, while its source
// has a set (ready). The budget counts the removals carried out under key
// within the delay too: one target at a time is no way around it. A
// decision over the budget seen for the first time is recorded, and
// returned as held, saying why; the caller looks again when the delay
// ends.
func (b *Budget) Allow(key string, ids []string, all int, ready bool, now time.Time) (ok bool, why error) {
	if len(ids) == 0 {
		delete(b.held, key)
		return true, nil
	}
	recent := b.recent(key, now)
	h := b.held[key]
	if h != nil && isSubset(ids, h.ids) {
		// Part of what is held, however small: held with it (giving some
		// targets back does not release the others).
		h.ids = ids
		if ready && (!h.since.After(b.confirmed) || now.Sub(h.since) >= b.confirm) {
			delete(b.held, key)
			b.note(key, len(ids), now)
			return true, nil
		}
		return false, nil
	}
	if !b.over(len(ids)+recent, all+recent) {
		delete(b.held, key)
		b.note(key, len(ids), now)
		return true, nil
	}
	b.held[key] = &decision{ids: ids, since: now}
	return false, fmt.Errorf("%s would remove %d of %d targets (%s; %d more removed in the last %s): over the deletion budget of %.0f%%; held until the same decision is made again after %s, or confirmed",
		key, len(ids), all, abbreviate(ids, 5), recent, b.confirm, b.share*100, b.confirm)
}

// Delay is how long a decision is held before it is carried out when made
// again.
func (b *Budget) Delay() time.Duration { return b.confirm }

// Confirm carries out, at their next decision, the removals held at now.
func (b *Budget) Confirm(now time.Time) { b.confirmed = now }

// recent counts the removals carried out under key within the
// confirmation delay before now, and forgets older ones.
func (b *Budget) recent(key string, now time.Time) int {
	times := b.removedAt[key]
	for len(times) > 0 && now.Sub(times[0]) >= b.confirm {
		times = times[1:]
	}
	if len(times) == 0 {
		delete(b.removedAt, key)
	} else {
		b.removedAt[key] = times
	}
	return len(times)
}

// note records n removals carried out under key at now.
func (b *Budget) note(key string, n int, now time.Time) {
	if n == 0 || b.share >= 1 {
		return
	}
	for range n {
		b.removedAt[key] = append(b.removedAt[key], now)
	}
}

// Forget drops the held decisions whose key starts with prefix that were
// not made again in a pass (seen: the keys decided on).
func (b *Budget) Forget(seen map[string]bool, prefix string) {
	for key := range b.held {
		if strings.HasPrefix(key, prefix) && !seen[key] {
			delete(b.held, key)
		}
	}
}

// Held is how many removals are held now.
func (b *Budget) Held() int {
	n := 0
	for _, h := range b.held {
		n += len(h.ids)
	}
	return n
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

// abbreviate lists the first n of ids, and how many more.
func abbreviate(ids []string, n int) string {
	if len(ids) <= n {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:n], ", "), len(ids)-n)
}
