package batch

import (
	"context"
	"log/slog"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/webhook"
)

// KindWebhook is a message that makes the next due attempt of a batch's
// webhook delivery.
const KindWebhook = "webhook"

// webhookBusyDelay is how long a webhook message waits when its account
// already has every attempt slot busy: well under the shortest retry
// delay (5 s), so the event is late by little.
const webhookBusyDelay = 2 * time.Second

// WebhookSlotStore keeps attempt slots shared by every invocation.
type WebhookSlotStore interface {
	AcquireSlot(ctx context.Context, key string, slots int, ttl time.Duration) (release func(), ok bool, err error)
}

// deliver makes the due attempt of a delivery and queues the next look at
// it. Every attempt goes through the store's claim, so duplicate messages
// never make an attempt twice.
func (w *Worker) deliver(ctx context.Context, m Message) error {
	if w.Webhooks == nil {
		return nil
	}
	if w.WebhookSlots != nil {
		// At most PerAccount attempts of one account at once across every
		// invocation: an account whose receiver never answers holds its
		// own slots for 10 s each, not the worker's.
		release, ok, err := w.WebhookSlots.AcquireSlot(ctx, "webhook#"+m.AccountID, positiveOr(w.WebhookPerAccount, webhook.DefaultPerAccount), webhook.Lease)
		if err != nil {
			return err
		}
		if !ok {
			// Every slot of the account is busy: look again shortly,
			// without holding this invocation.
			return w.Queue.Send(ctx, []Message{m}, webhookBusyDelay)
		}
		defer release()
	}
	d, attempted, err := w.Webhooks.Attempt(ctx, m.AccountID, m.BatchID)
	if err != nil {
		return err // redelivered by SQS; the lease keeps attempts apart
	}
	if d.BatchID == "" || d.State != evs.CallbackPending {
		return nil
	}
	wait := d.NextAt.Sub(w.now())
	if !attempted && wait <= 0 {
		return nil // claimed by another worker, which queues what follows
	}
	delay := w.delay(wait)
	if err := w.Queue.Send(ctx, []Message{{Kind: KindWebhook, AccountID: m.AccountID, BatchID: m.BatchID}}, delay); err != nil {
		return err
	}
	w.logger().Debug("webhook: next look queued", slog.String("batchId", m.BatchID), slog.Duration("delay", delay))
	return nil
}

// finalized tells the queue that b became final, if it did; a failure to
// queue is logged, not returned: the results are written and must not be
// redone for it.
func (w *Worker) finalized(ctx context.Context, b evs.Batch) {
	if w.Webhooks == nil || !b.State.Final() {
		return
	}
	// The delivery record itself was written with the final state, so a
	// message lost here delays the event, it does not lose the record.
	if err := w.Queue.Send(ctx, []Message{{Kind: KindWebhook, AccountID: b.AccountID, BatchID: b.ID}}, 0); err != nil {
		w.logger().Error("webhook: could not queue the delivery of a final batch", slog.String("batchId", b.ID), slog.String("error", err.Error()))
	}
}
