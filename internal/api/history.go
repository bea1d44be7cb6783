package api

import (
	"context"
	"log/slog"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// withHistory applies the account's reported outcomes to d
// (verify.WithHistory), after the cache, which keeps decisions without
// history. A store fault is logged and leaves d without them. A
// publishable key's verdict is decided without them: its reply goes to a
// web page's visitor, who must not learn what the account mailed.
func (h *Handler) withHistory(ctx context.Context, p evs.Principal, d evs.Decision) evs.Decision {
	if h.d.Outcomes == nil || d.Normalized == "" || p.Kind == evs.KeyPublishable {
		return d
	}
	ds := []evs.Decision{d}
	if err := verify.WithHistory(ctx, h.d.Outcomes, p.AccountID, h.d.OutcomeShareDomains, ds); err != nil {
		h.d.Logger.WarnContext(ctx, "outcomes: could not apply the reported outcomes; verdict given without them",
			slog.String("accountId", p.AccountID), slog.String("domain", evs.AddressDomain(d.Normalized)), slog.String("error", err.Error()))
	}
	return ds[0]
}
