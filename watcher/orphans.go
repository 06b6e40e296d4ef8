package watcher

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// pruneOrphans removes, once every route's source has given a set, what
// each [Inventory] sink holds for targets that no source wants (deleted
// while the program was down), within the deletion budget: a sink's
// orphans over it are held, and the sweep runs again at the next pass. It
// runs again, too, when a target named but not watched leaves its set
// (see resweep): it has no deliverer to be told. It reports whether it is
// done; a sink whose inventory cannot be listed is logged and not asked
// again.
func (w *Watcher) pruneOrphans(ctx context.Context) bool {
	w.mu.Lock()
	wanted := map[string]bool{}
	routes := w.routes
	for _, r := range routes {
		if !r.synced {
			w.mu.Unlock()
			return false
		}
		for _, t := range r.targets {
			wanted[t.ID] = true
		}
		for id := range r.invalid {
			wanted[id] = true // named: wanted, whatever else is true of it
		}
	}
	w.mu.Unlock()
	// A route's sinks do not change once it runs; finding the inventories
	// among them is the program's code (Unwrap), run without w.mu.
	var invs []inventorySink
	for _, r := range routes {
		for i, s := range r.sinks {
			if x, ok := as[Inventory](s.sink); ok {
				invs = append(invs, inventorySink{r.idx, i, s, x})
			}
		}
	}
	done := true
	seen := map[string]bool{}
	for _, x := range invs {
		key := fmt.Sprintf("the sweep at start of route %d's sink %s", x.route, x.sink.name)
		seen[key] = true
		done = w.sweep(ctx, x, key, wanted) && done
	}
	w.mu.Lock()
	w.removals.Forget(seen, "the sweep at start")
	w.mu.Unlock()
	return done
}

// inventorySink is a sink of a route that is an [Inventory].
type inventorySink struct {
	route, idx int
	sink       namedSink
	inventory  Inventory
}

// sweep removes what x holds for targets not wanted, within the deletion
// budget (the decision named key): false when it is held.
func (w *Watcher) sweep(ctx context.Context, x inventorySink, key string, wanted map[string]bool) bool {
	lctx, cancel := context.WithTimeout(ctx, w.opts.deliverTimeout)
	ids, err := x.inventory.Targets(lctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error(err, "listing what a sink holds: targets deleted while the program was down are not removed", "sink", x.sink.name)
		}
		return true
	}
	var orphans []string
	for _, id := range ids {
		if !wanted[id] {
			orphans = append(orphans, id)
		}
	}
	slices.Sort(orphans)
	w.mu.Lock()
	ready := true
	for _, r := range w.routes {
		ready = ready && r.noSet == nil
	}
	ok, e := w.allowRemoval(key, orphans, len(ids), ready)
	w.mu.Unlock()
	if e != nil {
		w.log.Error(e.Err, "removals held")
		w.emit(*e)
	}
	if !ok {
		return false
	}
	for _, id := range orphans {
		w.removeOrphan(ctx, x, id)
	}
	return true
}

// sweepAgain is how long the sweep waits to look again at an orphan whose
// deliverer is still going.
const sweepAgain = 2 * time.Second

// removeOrphan tells the deliverer of id to x to remove it, unless the
// target is wanted since or already being removed.
func (w *Watcher) removeOrphan(ctx context.Context, x inventorySink, id string) {
	w.log.Info("removing a target no source wants any more", "target", id, "sink", x.sink.name)
	t := Target{ID: id, Suspend: w.wasSuspended(ctx, id, x.sink.name)}
	dkey := keyOf(x.route, id).sink(x.idx)
	w.mu.Lock()
	if _, busy := w.deliverers[dkey]; busy || w.removing[dkey] != nil {
		// Wanted since, or its deliverer is still going (it left its set
		// not watched, and is let go of): the sweep looks again once it
		// may have gone, and then removes it if it is still not wanted.
		w.resweep = true
		w.mu.Unlock()
		time.AfterFunc(sweepAgain, func() {
			select {
			case w.changed <- struct{}{}:
			default:
			}
		})
		return
	}
	d := newDeliverer(w.env, dkey, &t, x.sink, nil)
	w.removing[dkey] = d
	w.mu.Unlock()
	d.remove()
	w.env.deliveries.Start(d)
}

// wasSuspended reports whether the checkpoint of id's delivery to the sink
// named sink says the target was suspended when last seen: its removal at
// start is then a Forget (see [Forgetter]). An unreadable checkpoint says
// no.
func (w *Watcher) wasSuspended(ctx context.Context, id, sink string) bool {
	cp, ok, err := w.opts.store.Get(ctx, id+"/"+sink)
	return err == nil && ok && cp.Suspended
}
