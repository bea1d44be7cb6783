// Package ttlcache is a size-bounded LRU whose entries also expire: the
// DNS resolver's answers and the shared domain facts are kept in it.
package ttlcache

import (
	"container/list"
	"sync"
	"time"
)

// Cache is a size-bounded LRU whose entries also expire. Expiry is checked
// against the caller's clock on read, so tests can move time. A nil *Cache
// keeps nothing. It is safe for concurrent use.
type Cache[V any] struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used; values are *entry[V]
	items map[string]*list.Element
}

type entry[V any] struct {
	key     string
	val     V
	expires time.Time
}

// New returns a cache of at most size entries (at least one).
func New[V any](size int) *Cache[V] {
	return &Cache[V]{max: max(size, 1), order: list.New(), items: make(map[string]*list.Element)}
}

// Get returns the value for key if present and not expired at now.
func (c *Cache[V]) Get(key string, now time.Time) (V, bool) {
	var zero V
	if c == nil {
		return zero, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*entry[V])
	if !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.items, key)
		return zero, false
	}
	c.order.MoveToFront(el)
	return e.val, true
}

// Put stores val until now+ttl, evicting the least recently used entry
// when full. A ttl of zero or less stores nothing.
func (c *Cache[V]) Put(key string, val V, now time.Time, ttl time.Duration) {
	if c == nil || ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*entry[V])
		e.val, e.expires = val, now.Add(ttl)
		c.order.MoveToFront(el)
		return
	}
	for c.order.Len() >= c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*entry[V]).key)
	}
	c.items[key] = c.order.PushFront(&entry[V]{key: key, val: val, expires: now.Add(ttl)})
}

// Len reports the number of entries, expired ones included.
func (c *Cache[V]) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// Cap reports the most entries the cache holds.
func (c *Cache[V]) Cap() int {
	if c == nil {
		return 0
	}
	return c.max
}
