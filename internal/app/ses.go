package app

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
)

// SESQueue is the worker's part for the stack's SES notification queue:
// subscribed without raw message delivery, so each body is the SNS message
// as SNS signed it, verified here as `evs serve` verifies it. The outcomes
// are the account's that the stack names.
type SESQueue struct {
	// QueueARN tells the queue's records from the work queue's.
	QueueARN string
	Receiver *api.SNSOutcomes
	// Account names the account; its id is looked up once.
	Account  string
	Accounts interface {
		AccountByName(ctx context.Context, name string) (evs.Account, error)
	}
	Logger *slog.Logger

	mu        sync.Mutex
	accountID string
}

// Route returns the worker's handler: the records of the SES queue go to
// q, the others to work (the work queue's handler).
func (q *SESQueue) Route(work func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var mine, rest events.SQSEvent
		for _, r := range ev.Records {
			if r.EventSourceARN == q.QueueARN {
				mine.Records = append(mine.Records, r)
			} else {
				rest.Records = append(rest.Records, r)
			}
		}
		var resp events.SQSEventResponse
		if len(rest.Records) > 0 {
			var err error
			if resp, err = work(ctx, rest); err != nil {
				return resp, err
			}
		}
		if len(mine.Records) > 0 {
			r := q.Handle(ctx, mine)
			resp.BatchItemFailures = append(resp.BatchItemFailures, r.BatchItemFailures...)
		}
		return resp, nil
	}
}

// Handle stores the outcomes of each record's SES notification. A record
// that is refused or fails is reported failed, so it is retried or reaches
// the dead-letter queue, where a person can look at it, not vanishing.
func (q *SESQueue) Handle(ctx context.Context, ev events.SQSEvent) events.SQSEventResponse {
	logger := cmp.Or(q.Logger, slog.Default())
	var resp events.SQSEventResponse
	fail := func(r events.SQSMessage) {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
	}
	account, err := q.account(ctx)
	if err != nil {
		logger.Error("ses notifications: the account is not found; the messages will be redelivered",
			slog.String("error", err.Error()))
		for _, r := range ev.Records {
			fail(r)
		}
		return resp
	}
	for _, r := range ev.Records {
		rec, err := q.Receiver.Receive(ctx, account, []byte(r.Body))
		if err != nil {
			// The error names no address: the cause is the signature's,
			// the topic's or the store's.
			logger.Error("ses notification not stored", slog.String("messageId", r.MessageId),
				slog.String("code", evs.ErrorCode(err)), slog.String("error", err.Error()))
			fail(r)
			continue
		}
		logger.Info("ses notification", slog.String("messageId", r.MessageId), slog.String("type", rec.Type),
			slog.Int("outcomes", rec.Received), slog.Int("accepted", rec.Accepted), slog.Int("skipped", rec.Skipped))
	}
	return resp
}

// account returns the account's id, looked up by name on first use.
func (q *SESQueue) account(ctx context.Context) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.accountID != "" {
		return q.accountID, nil
	}
	a, err := q.Accounts.AccountByName(ctx, q.Account)
	if err != nil {
		return "", fmt.Errorf("sqsqueue: account %q: %w", q.Account, err)
	}
	q.accountID = a.ID
	return a.ID, nil
}
