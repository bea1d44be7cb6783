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
}

// historyTimeout bounds one lookup of a group's outcomes.
const historyTimeout = 30 * time.Second

// withHistory applies the account's reported outcomes to a step's results
// (verify.ApplyHistory, the rule /v1/verify applies too), after the cache,
// which keeps decisions without them: one lookup for the whole group. A
// store fault is logged and leaves the results as the checks made them.
func (w *Worker) withHistory(ctx context.Context, b evs.Batch, rs []evs.Result) []evs.Result {
	if w.History == nil || len(rs) == 0 {
		return rs
	}
	addrs := make([]string, 0, len(rs))
	for _, r := range rs {
		if r.Decision.Normalized != "" {
			addrs = append(addrs, r.Decision.Normalized)
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
	if len(got) == 0 {
		return rs
	}
	for i := range rs {
		if os := got[rs[i].Decision.Normalized]; len(os) > 0 {
			rs[i].Decision = verify.ApplyHistory(rs[i].Decision, verify.History{Outcomes: os})
		}
	}
	return rs
}
