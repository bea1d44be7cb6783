package batch

import (
	"context"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// The account result cache in batches (contract, section 12), shared by
// the in-process runner of `evs serve` and the SQS worker on AWS: before a
// group is probed, the items whose verdict the account's cache holds fresh
// become results without SMTP; the group's new verdicts are kept.

// UsesCache tells whether a group goes through the account's cache: live
// full-mode groups of a real domain only. Test mode never reads or writes
// it, and a quick-mode group costs one DNS lookup for its domain, less than
// a cache read per address.
func UsesCache(c ResultCache, test bool, mode evs.Mode, domain string) bool {
	return c != nil && !test && mode == evs.ModeFull && domain != ""
}

// FromCache looks each item up in b's account's cache, within b's maxAge,
// and returns the hits as results (decision.cached set, the original
// checkedAt kept) and the other items, to be probed.
func FromCache(ctx context.Context, c ResultCache, b evs.Batch, items []evs.Item) (hits []evs.Result, rest []evs.Item) {
	rest = items[:0:0]
	for _, it := range items {
		if key, _, ok := verify.NormalizedKey(it.Email); ok {
			if d, hit := c.Lookup(ctx, b.AccountID, b.Mode, key, it.Email, b.MaxAge); hit {
				hits = append(hits, evs.Result{Seq: it.Seq, Email: it.Email, Decision: d})
				continue
			}
		}
		rest = append(rest, it)
	}
	return hits, rest
}

// KeepResults writes the new verdicts of rs to the account's cache (the
// cache itself leaves out what may not be reused). A fault is the caller's
// to log: the verdicts stand without it.
func KeepResults(ctx context.Context, c ResultCache, accountID string, rs []evs.Result) error {
	if len(rs) == 0 {
		return nil
	}
	ds := make([]evs.Decision, len(rs))
	for i := range rs {
		ds[i] = rs[i].Decision
	}
	return c.Keep(ctx, accountID, ds...)
}
