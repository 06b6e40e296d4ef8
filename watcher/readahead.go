package watcher

import (
	"context"
	"fmt"
	"sync"
)

// readAhead holds checkpoints read in batches. A BatchStore reads them
// together for the targets of remotes that started together (see
// startRemotes), each for the first read of its key by a poll of its remote while it is polled
// here. An entry is made before the batch is read, so a write of its key
// by this watcher from then on drops it, and none is made for a key being
// written then: what is served is what the store held after the remote
// was owned and before this watcher wrote the key again. Another replica
// does not write a key whose remote this one owns.
type readAhead struct {
	mu      sync.Mutex
	entries map[string]aheadEntry // by checkpoint key
	writing map[string]int        // the writes of each key in progress
}

type aheadEntry struct {
	Lookup
	remote string          // the key of the remote it was read for
	live   context.Context // that remote's, once it started; until then it serves nothing
	// batch is the read it waits for; nil once read.
	batch chan struct{}
}

// batchKeys are the checkpoint keys of the targets of the remotes named
// fresh, with the remote of each.
func batchKeys(fresh []string, specs map[string]*remoteSpec) (keys, remotes []string) {
	for _, rk := range fresh {
		for _, b := range specs[rk].targets {
			for _, d := range b.sinks {
				keys, remotes = append(keys, d.key), append(remotes, rk)
			}
		}
	}
	return keys, remotes
}

// startBatch makes the entries of the checkpoints of the targets of the
// remotes named fresh, when the store is a BatchStore and there are
// several, and returns what reads them (nil: nothing to read). Until it
// has, a read of one of them waits for it.
func (v *env) startBatch(fresh []string, specs map[string]*remoteSpec) func(context.Context) {
	bs, ok := v.opts.store.(BatchStore)
	if !ok {
		return nil
	}
	keys, remotes := batchKeys(fresh, specs)
	if len(keys) < 2 {
		return nil
	}
	batch := make(chan struct{})
	a := &v.ahead
	a.mu.Lock()
	if a.entries == nil {
		a.entries = make(map[string]aheadEntry, len(keys))
	}
	for i, k := range keys {
		if a.writing[k] == 0 {
			a.entries[k] = aheadEntry{remote: remotes[i], batch: batch}
		}
	}
	a.mu.Unlock()
	return func(ctx context.Context) {
		defer close(batch)
		ctx, cancel := context.WithTimeout(ctx, v.opts.listTimeout)
		defer cancel()
		got, err := bs.GetMany(ctx, keys)
		if err == nil && len(got) != len(keys) {
			err = fmt.Errorf("watcher: GetMany returned %d checkpoints for %d keys", len(got), len(keys))
		}
		if err != nil && ctx.Err() == nil {
			v.log.Error(err, "read checkpoints together; reading each alone", "keys", len(keys))
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		for i, k := range keys {
			e, ok := a.entries[k]
			switch {
			case !ok || e.batch != batch:
				// Written meanwhile, or another batch's.
			case err != nil:
				delete(a.entries, k)
			default:
				e.Lookup, e.batch = got[i], nil
				a.entries[k] = e
			}
		}
	}
}

// claim gives the entries read for r to its polls; r has its context, and
// has not polled yet.
func (v *env) claim(r *remote) {
	a := &v.ahead
	a.mu.Lock()
	none := len(a.entries) == 0
	a.mu.Unlock()
	if none {
		return
	}
	keys := r.checkpointKeys(nil)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range keys {
		if e, ok := a.entries[k]; ok && e.remote == r.key && e.live == nil {
			e.live = r.ctx
			a.entries[k] = e
		}
	}
}

// drop drops the entries read for the remote named key, whose mirror did
// not open.
func (v *env) drop(key string, spec *remoteSpec) {
	a := &v.ahead
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, b := range spec.targets {
		for _, d := range b.sinks {
			if e, ok := a.entries[d.key]; ok && e.remote == key && e.live == nil {
				delete(a.entries, d.key)
			}
		}
	}
}

// forget drops what is left of the entries of r, which stops (kept nil),
// or of its targets that kept no longer holds: a target that leaves and
// comes back may have been delivered elsewhere meanwhile.
func (v *env) forget(r *remote, kept map[targetKey]*boundTarget) {
	a := &v.ahead
	a.mu.Lock()
	none := len(a.entries) == 0
	a.mu.Unlock()
	if none || r.ctx == nil {
		return
	}
	keys := r.checkpointKeys(func(k targetKey) bool { _, ok := kept[k]; return !ok })
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range keys {
		if e, ok := a.entries[k]; ok && e.live == r.ctx {
			delete(a.entries, k)
		}
	}
}

// checkpointKeys are the checkpoint keys of r's targets, of those whose
// key is chosen when chosen is set.
func (r *remote) checkpointKeys(chosen func(target targetKey) bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var keys []string
	for k, p := range r.targets {
		if chosen != nil && !chosen(k) {
			continue
		}
		for _, d := range p.bound.sinks {
			keys = append(keys, d.key)
		}
	}
	return keys
}

// take returns, once, the checkpoint of key read ahead for the poll whose
// context is live, waiting for its batch if it is being read.
func (v *env) take(ctx context.Context, key string, live context.Context) (Lookup, bool) {
	a := &v.ahead
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		e, ok := a.entries[key]
		if !ok || live == nil || e.live != live {
			return Lookup{}, false
		}
		if e.batch == nil {
			delete(a.entries, key)
			return e.Lookup, true
		}
		a.mu.Unlock()
		select {
		case <-e.batch:
		case <-ctx.Done():
		case <-live.Done():
		}
		a.mu.Lock()
		if ctx.Err() != nil || live.Err() != nil {
			return Lookup{}, false
		}
	}
}

// write is a Put or Delete of key in the store: what was read ahead for it
// is dropped, and a batch that starts meanwhile leaves it out.
func (v *env) write(key string, do func() error) error {
	a := &v.ahead
	a.mu.Lock()
	delete(a.entries, key)
	if a.writing == nil {
		a.writing = map[string]int{}
	}
	a.writing[key]++
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.writing[key]--; a.writing[key] == 0 {
			delete(a.writing, key)
		}
	}()
	return do()
}
