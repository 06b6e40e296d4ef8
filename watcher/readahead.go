package watcher

import (
	"context"
	"fmt"
	"sync"
)

// readAhead holds the checkpoints a BatchStore read together for the
// targets of remotes that started together (see startRemotes), each for
// the first read of its key by a poll of its remote while it is polled
// here. A write of the key by this watcher drops it, and one made while
// the batch was read keeps it out: what is served is what the store held
// after the remote was owned and before this watcher last wrote the key.
// Another replica does not write a key whose remote this one owns.
type readAhead struct {
	mu      sync.Mutex
	entries map[string]aheadEntry // by checkpoint key
	// writing counts the writes of each key in progress; while batches
	// are read (reading > 0), touched names every key written since the
	// first of them started, or being written then.
	writing map[string]int
	reading int
	touched map[string]bool
}

type aheadEntry struct {
	Lookup
	remote string          // the key of the remote it was read for
	live   context.Context // that remote's, once it started; until then it serves nothing
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

// readBatch reads the checkpoints of the targets of the remotes named
// fresh in one GetMany, when the store is a BatchStore and there are
// several. A failure is logged: each key is then read on its own.
func (v *env) readBatch(ctx context.Context, fresh []string, specs map[string]*remoteSpec) {
	bs, ok := v.opts.store.(BatchStore)
	if !ok {
		return
	}
	keys, remotes := batchKeys(fresh, specs)
	if len(keys) < 2 {
		return
	}
	a := &v.ahead
	a.mu.Lock()
	if a.reading == 0 {
		a.touched = map[string]bool{}
	}
	a.reading++
	for k := range a.writing {
		a.touched[k] = true
	}
	a.mu.Unlock()
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
	if err == nil {
		if a.entries == nil {
			a.entries = make(map[string]aheadEntry, len(keys))
		}
		for i, k := range keys {
			if !a.touched[k] {
				a.entries[k] = aheadEntry{Lookup: got[i], remote: remotes[i]}
			}
		}
	}
	if a.reading--; a.reading == 0 {
		a.touched = nil
	}
}

// claim gives the entries read for r to its polls; r has its context, and
// has not polled yet.
func (v *env) claim(r *remote) {
	keys := r.checkpointKeys()
	a := &v.ahead
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

// forget drops what is left of the entries of r, which stops.
func (v *env) forget(r *remote) {
	if r.ctx == nil {
		return
	}
	keys := r.checkpointKeys()
	a := &v.ahead
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range keys {
		if e, ok := a.entries[k]; ok && e.live == r.ctx {
			delete(a.entries, k)
		}
	}
}

// checkpointKeys are the checkpoint keys of r's targets.
func (r *remote) checkpointKeys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var keys []string
	for _, p := range r.targets {
		for _, d := range p.b.sinks {
			keys = append(keys, d.key)
		}
	}
	return keys
}

// take returns, once, the checkpoint of key read ahead for the poll whose
// context is live.
func (v *env) take(key string, live context.Context) (Lookup, bool) {
	a := &v.ahead
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.entries[key]
	if !ok || live == nil || e.live != live {
		return Lookup{}, false
	}
	delete(a.entries, key)
	return e.Lookup, true
}

// write is a Put or Delete of key in the store: what was read ahead for it
// is dropped, and a batch read meanwhile leaves it out.
func (v *env) write(key string, do func() error) error {
	a := &v.ahead
	a.mu.Lock()
	delete(a.entries, key)
	if a.writing == nil {
		a.writing = map[string]int{}
	}
	a.writing[key]++
	if a.reading > 0 {
		a.touched[key] = true
	}
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
