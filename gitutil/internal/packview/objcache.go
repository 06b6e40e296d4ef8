package packview

import (
	"container/list"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
)

// ObjectLRU is an object cache of at most max bytes of objects, the least
// recently used evicted first: go-git's cache.ObjectLRU without its map
// made for 1,000 entries at the first Put (about 55 KB, for a mirror or a
// file system that may read three objects). A watcher of 1,000 mirrors
// delivering 10,000 targets allocated 590 MB of those maps, one per file
// system handed out and one per mirror held (fleet, heap profile).
type ObjectLRU struct {
	max cache.FileSize

	mu   sync.Mutex
	size cache.FileSize
	ll   list.List
	m    map[plumbing.Hash]*list.Element
}

var _ cache.Object = (*ObjectLRU)(nil)

// NewObjectLRU is an empty ObjectLRU of at most max bytes.
func NewObjectLRU(max cache.FileSize) *ObjectLRU { return &ObjectLRU{max: max} }

// Put implements cache.Object: obj becomes the most recently used, and the
// least recently used leave until the cache is within its size. An object
// larger than the whole cache is not kept.
func (c *ObjectLRU) Put(obj plumbing.EncodedObject) {
	c.mu.Lock()
	defer c.mu.Unlock()
	size := cache.FileSize(obj.Size())
	if e, ok := c.m[obj.Hash()]; ok {
		c.size += size - cache.FileSize(e.Value.(plumbing.EncodedObject).Size())
		e.Value = obj
		c.ll.MoveToFront(e)
	} else {
		if size > c.max {
			return
		}
		if c.m == nil {
			c.m = map[plumbing.Hash]*list.Element{}
		}
		c.m[obj.Hash()] = c.ll.PushFront(obj)
		c.size += size
	}
	for c.size > c.max {
		last := c.ll.Back()
		if last == nil {
			c.size = 0
			break
		}
		o := c.ll.Remove(last).(plumbing.EncodedObject)
		delete(c.m, o.Hash())
		c.size -= cache.FileSize(o.Size())
	}
}

// Get implements cache.Object.
func (c *ObjectLRU) Get(h plumbing.Hash) (plumbing.EncodedObject, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[h]
	if !ok {
		return nil, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(plumbing.EncodedObject), true
}

// Clear implements cache.Object: everything goes, and the memory with it.
func (c *ObjectLRU) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m, c.size = nil, 0
	c.ll.Init()
}
