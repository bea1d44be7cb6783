// Package ttlcache is a size-bounded LRU whose entries also expire: the
// DNS resolver's answers and the shared domain facts are kept in it. The
// LRU itself is hashicorp/golang-lru's (also the result cache's memory
// front); what this package adds is an expiry per entry, checked against
// the caller's clock so tests can move time.
package ttlcache

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Cache is a size-bounded LRU whose entries also expire. Expiry is checked
// against the caller's clock on read. A nil *Cache keeps nothing. It is
// safe for concurrent use.
type Cache[V any] struct {
	lru *lru.Cache[string, entry[V]]
	max int
}

type entry[V any] struct {
	val     V
	expires time.Time
}

// New returns a cache of at most size entries (at least one).
func New[V any](size int) *Cache[V] {
	size = max(size, 1)
	c, _ := lru.New[string, entry[V]](size) // errs only for size <= 0
	return &Cache[V]{lru: c, max: size}
}

// Get returns the value for key if present and not expired at now.
func (c *Cache[V]) Get(key string, now time.Time) (V, bool) {
	var zero V
	if c == nil {
		return zero, false
	}
	e, ok := c.lru.Get(key)
	if !ok {
		return zero, false
	}
	if !now.Before(e.expires) {
		c.lru.Remove(key)
		return zero, false
	}
	return e.val, true
}

// Put stores val until now+ttl, evicting the least recently used entry
// when full. A ttl of zero or less stores nothing.
func (c *Cache[V]) Put(key string, val V, now time.Time, ttl time.Duration) {
	if c == nil || ttl <= 0 {
		return
	}
	c.lru.Add(key, entry[V]{val: val, expires: now.Add(ttl)})
}

// Len reports the number of entries, expired ones included.
func (c *Cache[V]) Len() int {
	if c == nil {
		return 0
	}
	return c.lru.Len()
}

// Cap reports the most entries the cache holds.
func (c *Cache[V]) Cap() int {
	if c == nil {
		return 0
	}
	return c.max
}
