package readahead

import (
	"context"
	"sync"
)

// Cache holds values read in batches. An entry is made before its batch is
// read, so a write of its key from then on drops it, and none is made for
// a key being written then: what is served is what was read after the
// batch started and before the key was written again. Each entry is for
// one owner, and serves the reads of one of its runs (a context) once that
// run has claimed it. The zero Cache is empty and ready.
type Cache[V any] struct {
	mu      sync.Mutex
	entries map[string]entry[V] // by key
	writing map[string]int      // the writes of each key in progress
}

type entry[V any] struct {
	value V
	owner string          // who it was read for
	live  context.Context // the owner's run, once claimed; until then it serves nothing
	// batch is the read it waits for; nil once read.
	batch chan struct{}
}

// Len is how many entries the cache holds: none, most of the time.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Start makes the entries of keys, owners[i] the owner of keys[i], but
// for the keys being written, and returns what fills them: it calls get,
// which returns the value of each key (an error: none is kept), and until
// it has, a read of one of them waits for it.
func (c *Cache[V]) Start(keys, owners []string) func(get func() ([]V, error)) {
	batch := make(chan struct{})
	c.mu.Lock()
	if c.entries == nil {
		c.entries = make(map[string]entry[V], len(keys))
	}
	for i, k := range keys {
		if c.writing[k] == 0 {
			c.entries[k] = entry[V]{owner: owners[i], batch: batch}
		}
	}
	c.mu.Unlock()
	return func(get func() ([]V, error)) {
		defer close(batch)
		got, err := get()
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, k := range keys {
			e, ok := c.entries[k]
			switch {
			case !ok || e.batch != batch:
				// Written meanwhile, or another batch's.
			case err != nil:
				delete(c.entries, k)
			default:
				e.value, e.batch = got[i], nil
				c.entries[k] = e
			}
		}
	}
}

// Claim gives owner's entries among keys to its run live.
func (c *Cache[V]) Claim(owner string, live context.Context, keys []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if e, ok := c.entries[k]; ok && e.owner == owner && e.live == nil {
			e.live = live
			c.entries[k] = e
		}
	}
}

// Drop drops owner's entries among keys that no run claimed: the owner
// did not start.
func (c *Cache[V]) Drop(owner string, keys []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if e, ok := c.entries[k]; ok && e.owner == owner && e.live == nil {
			delete(c.entries, k)
		}
	}
}

// Forget drops what is left of the entries among keys claimed by the run
// live.
func (c *Cache[V]) Forget(live context.Context, keys []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if e, ok := c.entries[k]; ok && e.live == live {
			delete(c.entries, k)
		}
	}
}

// Take returns, once, the value of key read ahead for the run live,
// waiting for its batch if it is being read; it gives up when ctx or live
// ends.
func (c *Cache[V]) Take(ctx context.Context, key string, live context.Context) (V, bool) {
	var none V
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		e, ok := c.entries[key]
		if !ok || live == nil || e.live != live {
			return none, false
		}
		if e.batch == nil {
			delete(c.entries, key)
			return e.value, true
		}
		c.mu.Unlock()
		select {
		case <-e.batch:
		case <-ctx.Done():
		case <-live.Done():
		}
		c.mu.Lock()
		if ctx.Err() != nil || live.Err() != nil {
			return none, false
		}
	}
}

// Write runs do, a write of key: what was read ahead for it is dropped,
// and a batch that starts meanwhile leaves it out.
func (c *Cache[V]) Write(key string, do func() error) error {
	c.mu.Lock()
	delete(c.entries, key)
	if c.writing == nil {
		c.writing = map[string]int{}
	}
	c.writing[key]++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.writing[key]--; c.writing[key] == 0 {
			delete(c.writing, key)
		}
	}()
	return do()
}
