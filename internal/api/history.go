package api

import (
	"context"
	"log/slog"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// withHistory applies the account's reported outcomes of d's address, and
// for an accept-all or unchecked mailbox the counts learned for its
// domain, to d (verify.ApplyHistory, the one rule; the batch worker
// applies it too).
// It runs after the cache, which keeps decisions without history, so an
// outcome counts from the next answer on. A store fault is logged and
// leaves d as the checks made it: the verdict evs gave before outcomes
// existed, rather than no verdict.
func (h *Handler) withHistory(ctx context.Context, p evs.Principal, d evs.Decision) evs.Decision {
	if h.d.Outcomes == nil || d.Normalized == "" {
		return d
	}
	got, err := h.d.Outcomes.AddressOutcomes(ctx, p.AccountID, []string{d.Normalized})
	if err != nil {
		h.d.Logger.WarnContext(ctx, "outcomes: could not read the address's outcomes; verdict given without them",
			slog.String("accountId", p.AccountID), slog.String("error", err.Error()))
		return d
	}
	hist := verify.History{Outcomes: got[d.Normalized]}
	if verify.UsesDomainCounts(d) {
		domain := evs.AddressDomain(d.Normalized)
		counts, err := h.d.Outcomes.DomainCounts(ctx, p.AccountID, []string{domain}, h.d.OutcomeShareDomains)
		if err != nil {
			// The address's own outcomes still apply: the score is then
			// the evidence's own, as before counts were learned.
			h.d.Logger.WarnContext(ctx, "outcomes: could not read the domain's counts; score given without them",
				slog.String("accountId", p.AccountID), slog.String("domain", domain), slog.String("error", err.Error()))
		} else {
			hist.Domain, hist.DomainScope = counts[domain], domainScope(h.d.OutcomeShareDomains)
		}
	}
	return verify.ApplyHistory(d, hist)
}

// domainScope is checks.domainHistory.scope for the operator's choice.
func domainScope(shared bool) string {
	if shared {
		return evs.DomainScopeShared
	}
	return evs.DomainScopeAccount
}
