package cache

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// LRU is hashicorp/golang-lru's size-bounded LRU with an expiry per entry,
// checked against the caller's clock on read. A nil *LRU keeps nothing.
type LRU[V any] struct {
	lru *lru.Cache[string, lruEntry[V]]
	max int
}

type lruEntry[V any] struct {
	val     V
	expires time.Time
}

// NewLRU returns a cache of at most size entries (at least one).
func NewLRU[V any](size int) *LRU[V] {
	size = max(size, 1)
	c, _ := lru.New[string, lruEntry[V]](size) // errs only for size <= 0
	return &LRU[V]{lru: c, max: size}
}

// Get returns the value for key if present and not expired at now.
func (c *LRU[V]) Get(key string, now time.Time) (V, bool) {
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
func (c *LRU[V]) Put(key string, val V, now time.Time, ttl time.Duration) {
	if c == nil || ttl <= 0 {
		return
	}
	c.lru.Add(key, lruEntry[V]{val: val, expires: now.Add(ttl)})
}

// Len reports the number of entries, expired ones included.
func (c *LRU[V]) Len() int {
	if c == nil {
		return 0
	}
	return c.lru.Len()
}

// Cap reports the most entries the cache holds.
func (c *LRU[V]) Cap() int {
	if c == nil {
		return 0
	}
	return c.max
}
