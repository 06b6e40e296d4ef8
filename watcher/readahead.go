package watcher

import (
	"context"
	"fmt"
)

// The checkpoints of the targets of remotes that start together are read
// together when the store is a BatchStore (see startRemotes), into
// env.ahead, each for the first read of its key by a poll of its remote
// while it is polled here: what is served is what the store held after
// the remote was owned and before this watcher wrote the key again (see
// readahead.Cache). Another replica does not write a key whose remote
// this one owns.

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
	fill := v.ahead.Start(keys, remotes)
	return func(ctx context.Context) {
		fill(func() ([]Lookup, error) {
			ctx, cancel := context.WithTimeout(ctx, v.opts.listTimeout)
			defer cancel()
			got, err := bs.GetMany(ctx, keys)
			if err == nil && len(got) != len(keys) {
				err = fmt.Errorf("watcher: GetMany returned %d checkpoints for %d keys", len(got), len(keys))
			}
			if err != nil && ctx.Err() == nil {
				v.log.Error(err, "read checkpoints together; reading each alone", "keys", len(keys))
			}
			return got, err
		})
	}
}

// claim gives the entries read for r to its polls; r has its context, and
// has not polled yet.
func (v *env) claim(r *remote) {
	if v.ahead.Len() == 0 {
		return // r.mu not taken, nor its keys listed, for nothing
	}
	v.ahead.Claim(r.key, r.ctx, r.checkpointKeys(nil))
}

// drop drops the entries read for the remote named key, whose mirror did
// not open.
func (v *env) drop(key string, specs map[string]*remoteSpec) {
	keys, _ := batchKeys([]string{key}, specs)
	v.ahead.Drop(key, keys)
}

// forget drops what is left of the entries of r, which stops (kept nil),
// or of its targets that kept no longer holds: a target that leaves and
// comes back may have been delivered elsewhere meanwhile.
func (v *env) forget(r *remote, kept map[targetKey]*boundTarget) {
	if v.ahead.Len() == 0 || r.ctx == nil {
		return
	}
	v.ahead.Forget(r.ctx, r.checkpointKeys(func(k targetKey) bool { _, ok := kept[k]; return !ok }))
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
