package batch

import (
	"context"
	"log/slog"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// OutcomeHistory looks up an account's reported outcomes of addresses
// (contract, section 18); both stores implement it (store.Outcomes).
type OutcomeHistory interface {
	AddressOutcomes(ctx context.Context, accountID string, addresses []string) (map[string][]evs.Outcome, error)
	// DomainCounts returns the deliveries and hard bounces reported for
	// each domain, the account's or with shared every account's.
	DomainCounts(ctx context.Context, accountID string, domains []string, shared bool) (map[string]evs.DomainCounts, error)
}

// historyTimeout bounds one lookup of a group's outcomes.
const historyTimeout = 30 * time.Second

// withHistory applies the account's reported outcomes to a step's results,
// and to accept-all and unchecked mailboxes their domains' learned counts
// (verify.ApplyHistory, the rule /v1/verify applies too), after the cache,
// which keeps decisions without them: one lookup for the whole group. A
// store fault is logged and leaves the results as the checks made them.
func (w *Worker) withHistory(ctx context.Context, b evs.Batch, rs []evs.Result) []evs.Result {
	if w.History == nil || len(rs) == 0 {
		return rs
	}
	addrs := make([]string, 0, len(rs))
	var domains []string
	seen := map[string]bool{}
	for _, r := range rs {
		if r.Decision.Normalized != "" {
			addrs = append(addrs, r.Decision.Normalized)
			// Only an accept-all or unchecked mailbox's score uses its
			// domain's counts: the others' domains are not looked up.
			if d := evs.AddressDomain(r.Decision.Normalized); verify.UsesDomainCounts(r.Decision) && !seen[d] {
				seen[d] = true
				domains = append(domains, d)
			}
		}
	}
	if len(addrs) == 0 {
		return rs
	}
	// The results are written even when the step was cut short (a
	// shutdown keeps what cost network work): the lookup must not fail
	// for that reason and leave them without their history.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyTimeout)
	defer cancel()
	got, err := w.History.AddressOutcomes(lctx, b.AccountID, addrs)
	if err != nil {
		w.logger().Warn("outcomes: could not read the addresses' outcomes; verdicts given without them",
			slog.String("batchId", b.ID), slog.String("accountId", b.AccountID), slog.String("error", err.Error()))
		return rs
	}
	var counts map[string]evs.DomainCounts
	if len(domains) > 0 {
		counts, err = w.History.DomainCounts(lctx, b.AccountID, domains, w.ShareDomainCounts)
		if err != nil {
			// The addresses' own outcomes still apply.
			w.logger().Warn("outcomes: could not read the domains' counts; scores given without them",
				slog.String("batchId", b.ID), slog.String("accountId", b.AccountID), slog.String("error", err.Error()))
			counts = nil
		}
	}
	if len(got) == 0 && len(counts) == 0 {
		return rs
	}
	scope := evs.DomainScopeAccount
	if w.ShareDomainCounts {
		scope = evs.DomainScopeShared
	}
	for i := range rs {
		d := rs[i].Decision
		h := verify.History{Outcomes: got[d.Normalized]}
		if verify.UsesDomainCounts(d) {
			h.Domain, h.DomainScope = counts[evs.AddressDomain(d.Normalized)], scope
		}
		if len(h.Outcomes) > 0 || !h.Domain.Zero() {
			rs[i].Decision = verify.ApplyHistory(d, h)
		}
	}
	return rs
}
