package sqsqueue

import (
	"context"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
)

// expire completes a batch past its deadline: every pending item ends as
// unknown/timeout.
func (w *Worker) expire(ctx context.Context, b evs.Batch) error {
	acct, err := w.Accounts.Account(ctx, b.AccountID)
	if err != nil {
		return err
	}
	items, err := batch.AllPending(ctx, w.Store, b.AccountID, b.ID)
	if err != nil {
		return err
	}
	rs := batch.TimeoutResults(items, evs.Mode(b.Mode), acct.Test, batch.DetailDeadline, w.now())
	// At least one call, also with nothing pending: PutResults then
	// completes a batch whose last results were written but which was
	// never completed (a crash in between).
	for start := 0; start == 0 || start < len(rs); start += 1000 {
		final, err := w.Store.PutResults(ctx, b.AccountID, b.ID, rs[start:min(start+1000, len(rs))], w.now())
		if err != nil {
			return err
		}
		// Queues the webhook once the last chunk made the batch final.
		w.finalized(ctx, final)
	}
	return nil
}
