// The SQS port of batch work on AWS. It is here, not in package lambda,
// because it links the batch worker and the engine, which the authorizer
// function must not.

package app

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
)

// Client is the part of the SQS API the queue uses.
type Client interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Queue sends batch work to the SQS queue at its URL; it is a batch.Queue.
type Queue struct {
	client Client
	url    string
}

// NewQueue returns a queue on the SQS queue at url.
func NewQueue(client Client, url string) *Queue { return &Queue{client: client, url: url} }

// Enqueue queues the plan of a new batch.
func (q *Queue) Enqueue(ctx context.Context, b evs.Batch) error {
	return q.Send(ctx, []batch.Message{batch.PlanMessage(b)}, 0)
}

// Finalized queues the first delivery attempt of a batch a request made
// final (a cancel); the worker queues those of the batches it finishes.
func (q *Queue) Finalized(ctx context.Context, b evs.Batch) error {
	return q.Send(ctx, []batch.Message{{Kind: batch.KindWebhook, AccountID: b.AccountID, BatchID: b.ID}}, 0)
}

// Send sends messages in SQS batches of ten, delivered after delay (in
// whole seconds, rounded up, at most batch.MaxDelay).
func (q *Queue) Send(ctx context.Context, ms []batch.Message, delay time.Duration) error {
	secs := int32((min(max(delay, 0), batch.MaxDelay) + time.Second - 1) / time.Second)
	for chunk := range slices.Chunk(ms, 10) {
		entries := make([]types.SendMessageBatchRequestEntry, 0, len(chunk))
		for i, m := range chunk {
			b, err := json.Marshal(m)
			if err != nil {
				return err
			}
			entries = append(entries, types.SendMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(b)), DelaySeconds: secs,
			})
		}
		out, err := q.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
		if err != nil {
			return evs.Wrap(err, evs.CodeUnavailable, "The work queue is unavailable; retry.")
		}
		if len(out.Failed) > 0 {
			f := out.Failed[0]
			return evs.Wrap(fmt.Errorf("sqs: %d of %d messages failed, first: %s %s", len(out.Failed), len(entries), aws.ToString(f.Code), aws.ToString(f.Message)),
				evs.CodeUnavailable, "The work queue is unavailable; retry.")
		}
	}
	return nil
}

// MaxDelay is the longest delay SQS takes, batch.MaxDelay.
func (q *Queue) MaxDelay() time.Duration { return batch.MaxDelay }

// DelayUnit is a second: SQS counts delays in whole seconds.
func (q *Queue) DelayUnit() time.Duration { return time.Second }

// Redelivers is true: a message whose handling failed, or whose
// invocation was lost, comes back after the queue's visibility timeout.
func (q *Queue) Redelivers() bool { return true }

// SharedSlots is false: each message goes to an invocation, which ends
// within the function's timeout.
func (q *Queue) SharedSlots() bool { return false }

// SQSHandler is the worker Lambda's handler: each message of the event goes
// to w, all of them at once.
func SQSHandler(w *batch.Worker) func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	logger := cmp.Or(w.Logger, slog.Default())
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		// failed[i] is set by record i's own goroutine only; the reply
		// lists them in the event's order.
		failed := make([]bool, len(ev.Records))
		startBy := w.StartBy(ctx)
		// The records run side by side: one after another, a slow receiver
		// held every message behind it, billed by the second.
		var work sync.WaitGroup
		for i, rec := range ev.Records {
			var m batch.Message
			if err := json.Unmarshal([]byte(rec.Body), &m); err != nil {
				// It will never succeed, but dropping it would lose it
				// silently: failed, it reaches the dead-letter queue.
				logger.Error("unreadable message; it goes to the dead-letter queue", slog.String("messageId", rec.MessageId))
				failed[i] = true
				continue
			}
			again := redelivered(rec)
			work.Go(func() {
				if err := w.Handle(ctx, m, again, startBy); err != nil {
					logger.Error("message failed; it will be redelivered", slog.String("messageId", rec.MessageId),
						slog.String("batchId", m.BatchID), slog.String("error", err.Error()))
					failed[i] = true
				}
			})
		}
		work.Wait()
		var resp events.SQSEventResponse
		for i, f := range failed {
			if f {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
			}
		}
		return resp, nil
	}
}

// redelivered tells whether SQS may have handed rec to a worker before; a
// message without the attribute counts as one.
func redelivered(rec events.SQSMessage) bool {
	n, err := strconv.Atoi(rec.Attributes["ApproximateReceiveCount"])
	return err != nil || n > 1
}
