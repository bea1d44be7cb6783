package cache

import (
	"cmp"
	"context"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// VerdictMemoryEntries is the default bound of a VerdictMemory front: at
// about 330 bytes an entry (key, encoded decision, expiry;
// BenchmarkVerdictMemory reports it), some 11 MB.
const VerdictMemoryEntries = 32_768

// VerdictMemory answers an account's recent cache reads from process
// memory, in front of a Store no other process writes (`evs serve`'s), so
// a cached /v1/verify costs no database read. Writes go to the store first
// and to memory only once stored. It is bounded by an LRU; keys carry the
// account.
type VerdictMemory struct {
	store Store
	lru   *lru.Cache[memoryKey, memoryEntry]
}

type memoryKey struct {
	account, address string
	mode             evs.Mode
}

// memoryEntry holds the decision in the stores' codec: a third of a
// decoded Decision's size, and decoding is cheap beside a database read;
// nil when the store holds none.
type memoryEntry struct {
	decision []byte
	expires  time.Time
}

// NewVerdictMemory returns a front for st holding at most entries entries
// (VerdictMemoryEntries when entries <= 0).
func NewVerdictMemory(st Store, entries int) *VerdictMemory {
	entries = cmp.Or(max(entries, 0), VerdictMemoryEntries)
	c, _ := lru.New[memoryKey, memoryEntry](entries) // errs only for size <= 0
	return &VerdictMemory{store: st, lru: c}
}

// CachedDecision answers from memory when it holds the entry, else from the
// store, keeping what the store found for the next read.
func (m *VerdictMemory) CachedDecision(ctx context.Context, accountID string, mode evs.Mode, address string) (evs.Decision, time.Time, bool, error) {
	k := memoryKey{account: accountID, address: address, mode: mode}
	if e, ok := m.lru.Get(k); ok {
		if e.decision == nil {
			return evs.Decision{}, time.Time{}, false, nil
		}
		if d, err := store.DecodeDecision(address, e.decision); err == nil {
			return d, e.expires, true, nil
		}
		m.lru.Remove(k)
	}
	d, expires, found, err := m.store.CachedDecision(ctx, accountID, mode, address)
	if err == nil && found {
		m.lru.Add(k, memoryEntry{decision: store.AppendCached(nil, d), expires: expires})
	} else if err == nil {
		// None stored, remembered (a nil decision) unless a keep got in
		// first: a verdict never kept (unknown, as every quick check of a
		// mailbox is) costs one read, not one a call.
		m.lru.ContainsOrAdd(k, memoryEntry{})
	}
	return d, expires, found, err
}

// KeepDecisions writes entries to the store and, once they are stored, to
// memory. When the store fails, memory forgets those keys: what the store
// holds for them is then unknown, and the next read asks it.
func (m *VerdictMemory) KeepDecisions(ctx context.Context, accountID string, entries []store.CacheEntry) error {
	err := m.store.KeepDecisions(ctx, accountID, entries)
	for _, e := range entries {
		k := memoryKey{account: accountID, address: e.Decision.Normalized, mode: e.Decision.Mode}
		if err != nil {
			m.lru.Remove(k)
		} else {
			m.lru.Add(k, memoryEntry{decision: store.AppendCached(nil, e.Decision), expires: e.ExpiresAt})
		}
	}
	return err
}
