package batch

import (
	"context"
	"log/slog"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// KindSweep is the message a schedule puts on the work queue: the worker
// then looks for work no message carries any more. Without it a batch whose
// messages all dead-lettered would stay running, and a delivery whose first
// message was never sent would stay pending.
const KindSweep = "sweep"

// SweepStore is what the sweep needs from the store.
type SweepStore interface {
	// Sweep lists the unfinished batches and the pending deliveries whose
	// next attempt and whose batch's final state are both at dueBy or
	// earlier.
	Sweep(ctx context.Context, dueBy time.Time) (unfinished []evs.Batch, overdue []evs.Delivery, err error)
	// ClaimStall records what a sweep at now sees of a batch and reports
	// true, to one caller only, when its processed count has not changed
	// for at least after; a claim starts a new window.
	ClaimStall(ctx context.Context, accountID, id string, now time.Time, after time.Duration) (bool, error)
	// ClaimOverdue reports true, to one caller per grace, when the
	// overdue delivery d has not moved since it was listed.
	ClaimOverdue(ctx context.Context, d evs.Delivery, now time.Time, grace time.Duration) (bool, error)
}

// Defaults of the sweep's windows.
const (
	// defaultStallAfter is longer than anything a live batch waits on: a
	// greylist retry's delay plus the function's timeout, and the queue's
	// visibility timeout (30 min).
	defaultStallAfter = 35 * time.Minute
	// defaultDeliveryGrace is past the function's timeout, so a message on
	// its way is seldom overtaken; a duplicate is harmless, as every
	// attempt is claimed in the store first.
	defaultDeliveryGrace = 10 * time.Minute
)

// sweep re-starts the work nobody carries: expired batches are finished,
// stalled ones planned again, overdue deliveries get a message. A failure
// is logged, not returned: the next scheduled sweep comes sooner than a
// redelivery would.
func (w *Worker) sweep(ctx context.Context) error {
	if w.Sweeper == nil {
		w.logger().Warn("sweep: no sweep store configured; message dropped")
		return nil
	}
	now := w.now()
	unfinished, overdue, err := w.Sweeper.Sweep(ctx, now.Add(-w.deliveryGrace()))
	if err != nil {
		w.logger().Error("sweep: could not list batches", slog.String("error", err.Error()))
		return nil
	}
	var expired, replanned, queued, failed int
	for _, b := range unfinished {
		did, err := w.sweepBatch(ctx, b, now)
		switch {
		case err != nil:
			failed++
			w.logger().Error("sweep: batch not handled", slog.String("batchId", b.ID), slog.String("error", err.Error()))
		case did == sweptExpired:
			expired++
		case did == sweptReplanned:
			replanned++
		}
	}
	for _, d := range overdue {
		mine, err := w.Sweeper.ClaimOverdue(ctx, d, now, w.deliveryGrace())
		if err != nil {
			failed++
			w.logger().Error("sweep: delivery not claimed", slog.String("batchId", d.BatchID), slog.String("error", err.Error()))
			continue
		}
		if !mine {
			continue // moved on meanwhile, or another sweep queued it
		}
		if err := w.Queue.Send(ctx, []Message{{Kind: KindWebhook, AccountID: d.AccountID, BatchID: d.BatchID}}, 0); err != nil {
			failed++
			w.logger().Error("sweep: delivery not queued", slog.String("batchId", d.BatchID), slog.String("error", err.Error()))
			continue
		}
		queued++
	}
	// Parked work whose wait is over starts even if no wake or session
	// end starts it (a worker that died between a park and its wake).
	failed += w.sweepParked(ctx)
	w.logger().Info("sweep", slog.Int("unfinished", len(unfinished)), slog.Int("expired", expired),
		slog.Int("replanned", replanned), slog.Int("deliveriesQueued", queued), slog.Int("failed", failed))
	return nil
}

// sweepOutcome is what the sweep did to a batch.
type sweepOutcome int

const (
	sweptNothing sweepOutcome = iota
	sweptExpired
	sweptReplanned
)

// sweepBatch finishes b if it is past its deadline, else plans it again if
// it stalled.
func (w *Worker) sweepBatch(ctx context.Context, b evs.Batch, now time.Time) (sweepOutcome, error) {
	if PastDeadline(b, w.Deadline, now) {
		// As a plan message would: queued becomes running, then every
		// pending item ends as unknown/timeout.
		if b.State == evs.StateQueued {
			if _, err := w.Store.TransitionBatch(ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateRunning, "", now); err != nil && evs.ErrorCode(err) != evs.CodeInvalidState {
				return sweptNothing, err
			}
		}
		return sweptExpired, w.expire(ctx, b)
	}
	stalled, err := w.Sweeper.ClaimStall(ctx, b.AccountID, b.ID, now, w.stallAfter())
	if err != nil || !stalled {
		return sweptNothing, err
	}
	// The plan starts from the first pending item; results already
	// written are never counted again (PutResults is exactly-once), and
	// the claim above lets one sweep per window get here.
	w.logger().Warn("sweep: batch made no progress; planned again", slog.String("batchId", b.ID),
		slog.Int("processed", b.Counters.Processed))
	return sweptReplanned, w.Queue.Send(ctx, []Message{ReplanMessage(b)}, 0)
}

func (w *Worker) stallAfter() time.Duration { return positiveOr(w.StallAfter, defaultStallAfter) }

func (w *Worker) deliveryGrace() time.Duration {
	return positiveOr(w.DeliveryGrace, defaultDeliveryGrace)
}

// expire completes a batch past its deadline: every pending item ends as
// unknown/timeout.
func (w *Worker) expire(ctx context.Context, b evs.Batch) error {
	acct, err := w.Accounts.Account(ctx, b.AccountID)
	if err != nil {
		return err
	}
	// Queues the webhook once the last chunk made the batch final.
	return Expire(ctx, w.Store, b, acct.Test, w.now, 1000, func(final evs.Batch) { w.finalized(ctx, final) })
}
