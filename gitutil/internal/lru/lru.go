package lru

import (
	"container/list"
	"sync"
)

// Cache maps keys to values, at most its bound of them; it is safe for
// concurrent use. Adding a key to a full Cache forgets the least recently
// used one (read or written), and hands it to the Cache's OnEvict.
type Cache[K comparable, V any] struct {
	mu      sync.Mutex
	max     int
	order   *list.List // of *entry, most recently used first
	byKey   map[K]*list.Element
	onEvict func(K, V)
}

type entry[K comparable, V any] struct {
	key K
	val V
}

// New returns an empty Cache of at most bound entries (at least one);
// onEvict, when not nil, is called with each entry it forgets, with no lock
// held.
func New[K comparable, V any](bound int, onEvict func(K, V)) *Cache[K, V] {
	return &Cache[K, V]{max: max(bound, 1), order: list.New(), byKey: map[K]*list.Element{}, onEvict: onEvict}
}

// Get returns the value of key, and whether there was one.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*entry[K, V]).val, true
}

// Add sets key's value.
func (c *Cache[K, V]) Add(key K, val V) {
	c.addIf(key, val, true)
}

// AddIfAbsent sets key's value unless it has one, and returns the value
// key has then.
func (c *Cache[K, V]) AddIfAbsent(key K, val V) V {
	return c.addIf(key, val, false)
}

func (c *Cache[K, V]) addIf(key K, val V, replace bool) V {
	c.mu.Lock()
	if el, ok := c.byKey[key]; ok {
		e := el.Value.(*entry[K, V])
		if replace {
			e.val = val
		}
		c.order.MoveToFront(el)
		c.mu.Unlock()
		return e.val
	}
	c.byKey[key] = c.order.PushFront(&entry[K, V]{key, val})
	var evicted *entry[K, V]
	if c.order.Len() > c.max {
		evicted = c.order.Remove(c.order.Back()).(*entry[K, V])
		delete(c.byKey, evicted.key)
	}
	c.mu.Unlock()
	if evicted != nil && c.onEvict != nil {
		c.onEvict(evicted.key, evicted.val)
	}
	return val
}

// Remove forgets key.
func (c *Cache[K, V]) Remove(key K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.order.Remove(el)
		delete(c.byKey, key)
	}
}

// Len is how many entries c holds.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// Values are c's values, most recently used first.
func (c *Cache[K, V]) Values() []V {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]V, 0, c.order.Len())
	for el := c.order.Front(); el != nil; el = el.Next() {
		out = append(out, el.Value.(*entry[K, V]).val)
	}
	return out
}
