package batch

import (
	"context"
	"log/slog"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// OutcomeHistory looks up an account's reported outcomes of addresses
// and the counts of domains.
type OutcomeHistory = verify.HistorySource

// historyTimeout bounds one lookup of a group's outcomes.
const historyTimeout = 30 * time.Second

// withHistory applies the account's reported outcomes and domain counts to
// a step's results (verify.WithHistory, as /v1/verify), after the cache,
// which keeps decisions without them. A store fault is logged.
func (w *Worker) withHistory(ctx context.Context, b evs.Batch, rs []evs.Result) []evs.Result {
	if w.History == nil || len(rs) == 0 {
		return rs
	}
	// The results are written even when the step was cut short (a
	// shutdown keeps what cost network work): the lookup must not fail
	// for that reason and leave them without their history.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyTimeout)
	defer cancel()
	ds := make([]evs.Decision, len(rs))
	for i := range rs {
		ds[i] = rs[i].Decision
	}
	if err := verify.WithHistory(lctx, w.History, b.AccountID, w.ShareDomainCounts, ds); err != nil {
		w.logger().Warn("outcomes: could not apply the reported outcomes; verdicts given without them",
			slog.String("batchId", b.ID), slog.String("accountId", b.AccountID), slog.String("error", err.Error()))
	}
	for i := range rs {
		rs[i].Decision = ds[i]
	}
	return rs
}
