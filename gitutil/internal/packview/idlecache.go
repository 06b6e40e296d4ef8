package packview

import (
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
)

// IdleCache is an object cache that empties itself once nothing has used
// it for idle. A mirror's cache serves the reads of one poll and of the
// deliveries after it; between polls a mirror holds none of it, so that a
// process with thousands of mirrors pays for the ones at work (go-git's
// default cache is up to 96 MiB per mirror, and never emptied). It waits
// on a runtime timer, not a goroutine.
type IdleCache struct {
	cache.Object
	idle  time.Duration
	last  atomic.Int64 // when it was last used, in Unix nanoseconds
	armed atomic.Bool  // a check is scheduled
}

// Idle is how long c keeps what it holds once nothing uses it.
func (c *IdleCache) Idle() time.Duration { return c.idle }

// NewIdleCache is c emptied once nothing used it for idle.
func NewIdleCache(c cache.Object, idle time.Duration) *IdleCache {
	return &IdleCache{Object: c, idle: idle}
}

func (c *IdleCache) used() {
	c.last.Store(time.Now().UnixNano())
	if c.armed.CompareAndSwap(false, true) {
		time.AfterFunc(c.idle, c.check)
	}
}

// check empties the cache if it has been idle long enough, and otherwise
// looks again when it will have been.
func (c *IdleCache) check() {
	last := c.last.Load()
	if rest := c.idle - time.Since(time.Unix(0, last)); rest > 0 {
		time.AfterFunc(rest, c.check)
		return
	}
	c.Object.Clear()
	c.armed.Store(false)
	if c.last.Load() != last && c.armed.CompareAndSwap(false, true) {
		time.AfterFunc(c.idle, c.check) // used meanwhile: it holds that now
	}
}

// Put implements cache.Object.
func (c *IdleCache) Put(o plumbing.EncodedObject) {
	c.used()
	c.Object.Put(o)
}

// Get implements cache.Object.
func (c *IdleCache) Get(k plumbing.Hash) (plumbing.EncodedObject, bool) {
	c.used()
	return c.Object.Get(k)
}
