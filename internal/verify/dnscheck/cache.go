package dnscheck

import (
	"container/list"
	"sync"
	"time"
)

// ttlCache is a size-bounded LRU whose entries also expire. Expiry is
// checked against the resolver's clock on read, so tests can move time.
type ttlCache[V any] struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used; values are *cacheEntry[V]
	items map[string]*list.Element
}

type cacheEntry[V any] struct {
	key     string
	val     V
	expires time.Time
}

func newTTLCache[V any](max int) *ttlCache[V] {
	return &ttlCache[V]{max: max, order: list.New(), items: make(map[string]*list.Element)}
}

// get returns the value for key if present and not expired at now.
func (c *ttlCache[V]) get(key string, now time.Time) (V, bool) {
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
	e := el.Value.(*cacheEntry[V])
	if !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.items, key)
		return zero, false
	}
	c.order.MoveToFront(el)
	return e.val, true
}

// put stores val until now+ttl, evicting the least recently used entry
// when full.
func (c *ttlCache[V]) put(key string, val V, now time.Time, ttl time.Duration) {
	if c == nil || ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*cacheEntry[V])
		e.val, e.expires = val, now.Add(ttl)
		c.order.MoveToFront(el)
		return
	}
	for c.order.Len() >= c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*cacheEntry[V]).key)
	}
	c.items[key] = c.order.PushFront(&cacheEntry[V]{key: key, val: val, expires: now.Add(ttl)})
}

// len reports the number of entries, expired ones included.
func (c *ttlCache[V]) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
