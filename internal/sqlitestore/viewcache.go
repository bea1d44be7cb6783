package sqlitestore

import (
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// viewCache keeps the views of batches (the batch and its delivery) in
// memory, so polling costs no read until the batch is written again: every
// write marks the batch written when it returns, and a view read before is
// never served again. It is only correct when every write goes through
// this Store (OpenServing).
type viewCache struct {
	mu sync.Mutex
	// gen counts the writes to batches, moved after each has committed.
	gen uint64
	// floor refuses views read before the map was last cleared, whose
	// tombstones went with it.
	floor uint64
	m     map[viewKey]viewEntry
}

// maxViews bounds the cache: ~1 KB a view, so a few MB at most.
const maxViews = 4096

type viewKey struct{ account, id string }

type viewEntry struct {
	view batchView
	// read is the gen at which the read of view began.
	read uint64
	// written, when not 0, is the gen of a write to the batch after which
	// no view has been kept yet: the entry holds no view.
	written uint64
}

type batchView struct {
	b     evs.Batch
	d     evs.Delivery
	found bool
}

func newViewCache() *viewCache { return &viewCache{m: map[viewKey]viewEntry{}} }

// begin is called before a read: its result goes to put.
func (c *viewCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// get returns the kept view of the batch if it has not expired by now.
func (c *viewCache) get(k viewKey, now time.Time) (batchView, bool) {
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if !ok || e.written != 0 || !now.Before(e.view.b.ExpiresAt) {
		return batchView{}, false
	}
	return e.view, true
}

// put keeps v, read from a read that began at gen read, if no write to
// the batch returned since the read began.
func (c *viewCache) put(k viewKey, v batchView, read uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if read < c.floor {
		return
	}
	if e, ok := c.m[k]; ok && e.written > read {
		return
	}
	c.room()
	c.m[k] = viewEntry{view: v, read: read}
}

// wrote marks a write to the batch as committed (or failed: either way a
// view read before it may be out of date).
func (c *viewCache) wrote(account, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.room()
	c.m[viewKey{account, id}] = viewEntry{written: c.gen}
}

// wroteAll marks a write that may have touched any batch.
func (c *viewCache) wroteAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.m)
	c.floor = c.gen
}

// room makes room for one more entry, forgetting all of them when full:
// simpler than an LRU, and a poll after it costs one read.
func (c *viewCache) room() {
	if len(c.m) >= maxViews {
		clear(c.m)
		c.floor = c.gen
	}
}
