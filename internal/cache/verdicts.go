package cache

import (
	"context"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// DefaultVerdictTTL is EVS_CACHE_TTL's default.
const DefaultVerdictTTL = 24 * time.Hour

// RiskyTTL bounds how long a risky verdict is kept: the state behind it
// (a full mailbox, an accept-all domain) changes faster.
const RiskyTTL = time.Hour

// Results of a lookup, the values of evs_cache_requests_total's label.
const (
	Hit   = "hit"
	Miss  = "miss"
	Stale = "stale"
)

// Store keeps the cached verdicts; sqlitestore.Store is one.
type Store interface {
	// CachedDecision returns the entry and its expiry, expired or not;
	// found is false when there is none.
	CachedDecision(ctx context.Context, accountID string, mode evs.Mode, address string) (d evs.Decision, expires time.Time, found bool, err error)
	KeepDecisions(ctx context.Context, accountID string, entries []store.CacheEntry) error
}

// Cache is the account result cache's policy over a Store: a live verdict
// is kept per account, normalised address and mode for a TTL (risky ones
// 1 h at most, unknown ones never) and given again, marked cached with its
// original checkedAt, to the same account's later calls and batches.
type Cache struct {
	Store Store
	TTL   time.Duration // EVS_CACHE_TTL; 0 keeps none
	Now   func() time.Time
	Count func(result string) // told each lookup's result (evs_cache_requests_total)
}

// Lookup returns the account's verdict for the normalised address in mode
// when one is kept, unexpired and no older than maxAge (0: no bound;
// evs.NoReuse reuses nothing), with Email set to email, Cached set, and
// DurationMs the lookup's own. A store fault is a miss.
func (c *Cache) Lookup(ctx context.Context, accountID string, mode evs.Mode, normalized, email string, maxAge time.Duration) (evs.Decision, bool) {
	if c == nil || c.TTL <= 0 || normalized == "" || maxAge < 0 {
		c.count(Miss)
		return evs.Decision{}, false
	}
	start := c.Now()
	d, expires, found, err := c.Store.CachedDecision(ctx, accountID, mode, normalized)
	if err != nil || !found {
		c.count(Miss)
		return evs.Decision{}, false
	}
	now := c.Now()
	if !now.Before(expires) || (maxAge > 0 && now.Sub(d.CheckedAt.Time) > maxAge) {
		c.count(Stale)
		return evs.Decision{}, false
	}
	c.count(Hit)
	d.Email, d.Cached, d.DurationMs = email, true, now.Sub(start).Milliseconds()
	return d, true
}

// Keep stores the account's decisions that may be reused: live (not test
// mode), not reused themselves, with a normalised address, and not unknown.
// A fault is returned for the caller to log; the decisions stand anyway.
func (c *Cache) Keep(ctx context.Context, accountID string, ds ...evs.Decision) error {
	if c == nil || c.TTL <= 0 {
		return nil
	}
	var es []store.CacheEntry
	now := c.Now()
	for _, d := range ds {
		ttl := c.ttl(d)
		if ttl <= 0 || d.TestMode || d.Cached || d.Normalized == "" {
			continue
		}
		at := d.CheckedAt.Time
		if at.IsZero() {
			at = now
		}
		if exp := at.Add(ttl); exp.After(now) {
			es = append(es, store.CacheEntry{Decision: d, ExpiresAt: exp})
		}
	}
	return c.Store.KeepDecisions(ctx, accountID, es)
}

// ttl is how long d may be reused.
func (c *Cache) ttl(d evs.Decision) time.Duration {
	if d.Checks.DNS.Result == evs.DNSMXNotPublic {
		return 0 // the egress policy's verdict, not the address's: it may change at the next start
	}
	switch d.Status() {
	case evs.Unknown:
		return 0
	case evs.Risky:
		return min(c.TTL, RiskyTTL)
	}
	return c.TTL
}

func (c *Cache) count(result string) {
	if c != nil && c.Count != nil {
		c.Count(result)
	}
}
