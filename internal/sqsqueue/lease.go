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
	// Queues the webhook once the last chunk made the batch final.
	return batch.Expire(ctx, w.Store, b, acct.Test, w.now, 1000, func(final evs.Batch) { w.finalized(ctx, final) })
}
