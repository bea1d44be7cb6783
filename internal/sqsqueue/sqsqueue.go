// Package sqsqueue runs batches on AWS: the requests function queues one
// "plan" message per new batch; the worker function turns a plan into work
// messages (addresses packed by domain) and processes work messages, with
// greylisted addresses sent back with an SQS delay. Results are written by
// the store's exactly-once PutResults, so a redelivered message never counts
// an address twice.
package sqsqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/webhook"
)

// Client is the part of the SQS API the queue uses.
type Client interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Message kinds.
const (
	KindPlan = "plan"
	KindWork = "work"
)

// Message is the body of every queue message.
type Message struct {
	Kind      string     `json:"kind"`
	AccountID string     `json:"accountId"`
	BatchID   string     `json:"batchId"`
	Items     []evs.Item `json:"items,omitempty"`
	Attempt   int        `json:"attempt,omitempty"`
	// From is, on a plan message, the first seq not planned yet: a batch
	// is planned a window at a time (see plan). Planned is how many
	// addresses earlier windows sent.
	From    int `json:"from,omitempty"`
	Planned int `json:"planned,omitempty"`
	// CacheRead is set on work the worker sends on (the rest of a
	// message out of time, greylisted retries, parked groups): their
	// items were looked up in the account's result cache already, so no
	// read is paid twice. A redelivery of the message itself, which may
	// have kept verdicts before it failed, looks its items up again.
	CacheRead bool `json:"cacheRead,omitempty"`
	// Waited is, on a greylisted retry, the SQS delay its items waited
	// since their first deferral (nanoseconds in JSON): what a retry
	// that gets through teaches about the domain (batch.LearnGrey).
	Waited time.Duration `json:"waited,omitempty"`
}

// Queue sends batch work to SQS.
type Queue struct {
	client Client
	url    string
}

// New returns a queue on the SQS queue at url.
func New(client Client, url string) *Queue { return &Queue{client: client, url: url} }

// Enqueue queues the plan of a new batch: one small message, so creating a
// batch of 50,000 addresses stays one fast call.
func (q *Queue) Enqueue(ctx context.Context, b evs.Batch) error {
	return q.send(ctx, []Message{{Kind: KindPlan, AccountID: b.AccountID, BatchID: b.ID}}, 0)
}

// send sends messages in SQS batches of ten, with a delay in seconds.
func (q *Queue) send(ctx context.Context, ms []Message, delay int32) error {
	for start := 0; start < len(ms); start += 10 {
		end := min(start+10, len(ms))
		entries := make([]types.SendMessageBatchRequestEntry, 0, end-start)
		for i, m := range ms[start:end] {
			b, err := json.Marshal(m)
			if err != nil {
				return err
			}
			entries = append(entries, types.SendMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(b)), DelaySeconds: delay,
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

// Store is what the worker keeps batches in: batch processing's part, and
// which of a redelivered message's items already have results.
type Store interface {
	batch.Store
	WithoutResults(ctx context.Context, accountID, id string, items []evs.Item) ([]evs.Item, error)
}

// Worker handles the queue's messages in the worker Lambda.
type Worker struct {
	Queue     *Queue
	Store     Store
	Accounts  batch.Accounts
	Processor *batch.Processor
	Now       func() time.Time
	Logger    *slog.Logger
	// PackSize is the most addresses one work message carries (default
	// 200): whole domains where they fit, so each domain sees one SMTP
	// connection and one accept-all probe.
	PackSize int
	// GreyBackoff is the first delay before greylisted addresses are
	// retried (default 5 min; SQS caps delays at 15 min).
	GreyBackoff time.Duration
	// Grey, when set, learns per domain how long its server deferred a
	// greylisted address before a retry got through, and a live batch's
	// first retry at such a domain waits that long instead of
	// GreyBackoff, as `evs serve`'s runner does (batch.NextGreyDelay;
	// dynamostore.DomainFacts shares it across invocations).
	Grey batch.GreyFacts
	// Concurrency is how many domain groups of a message run at once.
	Concurrency int
	// Cache, when set, is the account result cache (contract, section
	// 12): a live full-mode group's items whose verdict it holds fresh,
	// within the batch's maxAge, become results without SMTP, and new
	// verdicts are kept, as `evs serve`'s runner does (batch.FromCache).
	Cache batch.ResultCache

	// PlanWindow is the most addresses of one batch planned into work
	// messages at a time (default 2000, ten messages of 200): a batch of
	// 50,000 never fills the queue ahead of everybody else's.
	PlanWindow int
	// Deadline is a batch's time limit from its start (EVS_BATCH_DEADLINE;
	// 0 means none): past it, what is left ends as unknown/timeout.
	Deadline time.Duration
	// Polite keeps SMTP polite across every concurrent invocation: limits
	// per provider and egress address, pauses after throttling, and work
	// that waits parked in the store (polite.go). Nil: no limit across
	// invocations.
	Polite *Polite
	// Webhooks delivers batch events (KindWebhook messages); nil drops them.
	// The webhook messages of one event are attempted at once, beside the
	// other messages, so a receiver that never answers delays no other
	// message by its 10 s timeout.
	Webhooks *webhook.Deliverer
	// WebhookSlots, when set, bounds the attempts of one account in
	// flight across every invocation to WebhookPerAccount (default
	// webhook.DefaultPerAccount); a message over the bound waits 2 s in
	// the queue. Nil: no bound across invocations.
	WebhookSlots      WebhookSlotStore
	WebhookPerAccount int
	// Sweeper lists what the scheduled sweep (KindSweep messages) looks
	// at; nil drops sweep messages. StallAfter is how long a batch may
	// make no progress before the sweep plans it again (default 35 min);
	// DeliveryGrace how overdue a webhook delivery must be before the
	// sweep queues its message (default 10 min).
	Sweeper       SweepStore
	StallAfter    time.Duration
	DeliveryGrace time.Duration
	// Reserve is how long before the invocation's deadline the worker
	// stops starting SMTP sessions, to finish those under way and write
	// their results (default Processor.SessionLimit + 30 s): the Lambda
	// service never cuts off finished work, whose addresses would be
	// probed again on redelivery.
	Reserve time.Duration
}

// startBy is when the worker stops starting sessions in an invocation
// whose context ends at its deadline (the zero time without one): Reserve
// before it, but never more than half of what is left, so an invocation
// shorter than the reserve still gets work done.
func (w *Worker) startBy(ctx context.Context) time.Time {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Time{}
	}
	r := w.Reserve
	if r <= 0 {
		r = 30 * time.Second
		if w.Processor != nil {
			r += w.Processor.SessionLimit
		}
	}
	return dl.Add(-min(r, time.Until(dl)/2))
}

// Handle processes an SQS event and reports the messages that failed, so
// only those are redelivered (ReportBatchItemFailures).
func (w *Worker) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var (
		resp  events.SQSEventResponse
		mu    sync.Mutex
		hooks sync.WaitGroup
	)
	failed := func(rec events.SQSMessage, m Message, err error) {
		w.logger().Error("message failed; it will be redelivered", slog.String("messageId", rec.MessageId),
			slog.String("batchId", m.BatchID), slog.String("error", err.Error()))
		mu.Lock()
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
		mu.Unlock()
	}
	startBy := w.startBy(ctx)
	for _, rec := range ev.Records {
		var m Message
		if err := json.Unmarshal([]byte(rec.Body), &m); err != nil {
			// A message we cannot read will never succeed, but dropping it
			// would lose it silently: reported as failed, it reaches the
			// dead-letter queue after maxReceiveCount tries, where an alarm
			// and a person can look at it.
			w.logger().Error("unreadable message; it goes to the dead-letter queue", slog.String("messageId", rec.MessageId))
			mu.Lock()
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
			mu.Unlock()
			continue
		}
		if m.Kind == KindWebhook {
			// An attempt waits on the network for up to 10 s: run it
			// beside the rest rather than before it.
			hooks.Add(1)
			go func() {
				defer hooks.Done()
				if err := w.deliver(ctx, m); err != nil {
					failed(rec, m, err)
				}
			}()
			continue
		}
		var err error
		switch m.Kind {
		case KindPlan:
			err = w.plan(ctx, m)
		case KindWork:
			err = w.work(ctx, m, redelivered(rec), startBy)
		case KindUnparked:
			// Parked once: a copy may have run before a failure, so the
			// addresses with results are skipped, as on a redelivery.
			err = w.work(ctx, m, true, startBy)
		case KindWake:
			err = w.wake(ctx, rec.Body)
		case KindSweep:
			err = w.sweep(ctx)
		default:
			err = fmt.Errorf("sqsqueue: unknown message kind %q", m.Kind)
		}
		if err != nil {
			failed(rec, m, err)
		}
	}
	hooks.Wait()
	return resp, nil
}

func (w *Worker) logger() *slog.Logger {
	if w.Logger == nil {
		return slog.Default()
	}
	return w.Logger
}

func (w *Worker) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

// plan turns a window of a batch's pending items into work messages and,
// when more are left, queues a plan for the next window. The next window
// is planned only once at least half of this one is done: so a batch has
// at most PlanWindow addresses in the queue at a time, and the messages of
// every other batch interleave with its own instead of waiting behind all
// of them. "Done" is read from the batch's counters, not from its rows,
// and each window's items are read once: the planner's reads grow with
// the batch's size, not with its square.
func (w *Worker) plan(ctx context.Context, m Message) error {
	b, err := w.Store.Batch(ctx, m.AccountID, m.BatchID)
	if err != nil {
		if evs.ErrorCode(err) == evs.CodeNotFound {
			return nil // expired or never stored: nothing to do
		}
		return err
	}
	if b.State.Final() {
		return nil
	}
	if b.State == evs.StateQueued {
		if _, err := w.Store.TransitionBatch(ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateRunning, "", w.now()); err != nil && evs.ErrorCode(err) != evs.CodeInvalidState {
			return err
		}
	}
	if batch.PastDeadline(b, w.Deadline, w.now()) {
		return w.expire(ctx, b)
	}
	window := w.planWindow()
	if m.From > 0 && b.Counters.Processed < m.Planned-window/2 {
		// Half the last window is still in the queue: look again later.
		return w.Queue.send(ctx, []Message{m}, planPollSeconds)
	}
	items, err := w.Store.PendingItems(ctx, b.AccountID, b.ID, m.From-1, window)
	if err != nil {
		return err
	}
	if len(items) == 0 {
		// Nothing left to plan: a batch whose last results were written
		// but which a crash left uncompleted is completed by this call
		// (a plan the sweep sends finds such batches).
		final, err := w.Store.PutResults(ctx, b.AccountID, b.ID, nil, w.now())
		if err != nil {
			return err
		}
		w.finalized(ctx, final)
		return nil
	}
	msgs := Pack(m.AccountID, m.BatchID, items, w.packSize())
	if len(items) == window {
		msgs = append(msgs, Message{Kind: KindPlan, AccountID: m.AccountID, BatchID: m.BatchID,
			From: items[len(items)-1].Seq + 1, Planned: b.Counters.Processed + len(items)})
	}
	return w.Queue.send(ctx, msgs, 0)
}

// planPollSeconds is how often a plan waiting for its batch's window to
// drain looks again.
const planPollSeconds = 5

func (w *Worker) planWindow() int {
	if w.PlanWindow <= 1 {
		return 2000
	}
	return w.PlanWindow
}

func (w *Worker) packSize() int {
	if w.PackSize <= 0 {
		return 200
	}
	return w.PackSize
}

// Pack puts items into work messages of at most size addresses, keeping
// each domain's addresses together where they fit.
func Pack(accountID, batchID string, items []evs.Item, size int) []Message {
	var out []Message
	cur := Message{Kind: KindWork, AccountID: accountID, BatchID: batchID}
	flush := func() {
		if len(cur.Items) > 0 {
			out = append(out, cur)
			cur = Message{Kind: KindWork, AccountID: accountID, BatchID: batchID}
		}
	}
	for _, g := range batch.GroupByDomain(items) {
		if len(cur.Items)+len(g.Items) > size {
			flush()
		}
		for len(g.Items) > size {
			cur.Items = g.Items[:size]
			flush()
			g.Items = g.Items[size:]
		}
		cur.Items = append(cur.Items, g.Items...)
	}
	flush()
	return out
}

// redelivered tells whether SQS may have handed rec to a worker before; a
// message without the attribute counts as one.
func redelivered(rec events.SQSMessage) bool {
	n, err := strconv.Atoi(rec.Attributes["ApproximateReceiveCount"])
	return err != nil || n > 1
}

// work verifies one message's addresses and writes their results at once.
// A redelivered message skips the addresses that already have results.
// Past the invocation's startBy no new session starts: the results so far
// are written and the rest goes back on the queue, as a new message.
func (w *Worker) work(ctx context.Context, m Message, again bool, startBy time.Time) error {
	b, err := w.Store.Batch(ctx, m.AccountID, m.BatchID)
	if err != nil {
		if evs.ErrorCode(err) == evs.CodeNotFound {
			return nil
		}
		return err
	}
	if b.State.Final() {
		return nil // cancelled: stop new work
	}
	acct, err := w.Accounts.Account(ctx, m.AccountID)
	if err != nil {
		return err
	}
	if batch.PastDeadline(b, w.Deadline, w.now()) {
		rs := batch.TimeoutResults(m.Items, evs.Mode(b.Mode), acct.Test, batch.DetailDeadline, w.now())
		_, err := w.Store.PutResults(ctx, m.AccountID, m.BatchID, rs, w.now())
		return err
	}
	if again {
		if m.Items, err = w.Store.WithoutResults(ctx, m.AccountID, m.BatchID, m.Items); err != nil {
			return err
		}
		if len(m.Items) == 0 {
			return nil
		}
	}
	conc := w.Concurrency
	if conc <= 0 {
		conc = 8
	}
	var (
		mu      sync.Mutex
		results []evs.Result
		wrote   bool      // some results were written
		final   evs.Batch // the batch as the last write left it
		retry   []retrying
		left    []evs.Item
		parked  []parking
		firstEr error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, conc)
	)
	// flush writes the results gathered so far, with mu held. Results are
	// written as soon as a transaction's worth (flushAt) is done, not only
	// at the end: a worker that dies mid-message (out of memory, a crash)
	// loses at most that many, and the redelivery asks no server again
	// about the rest. It costs no extra transaction.
	flush := func() {
		if len(results) == 0 || (firstEr != nil && ctx.Err() != nil) {
			return
		}
		rs := results
		results = nil
		b, err := w.Store.PutResults(ctx, m.AccountID, m.BatchID, rs, w.now())
		if err != nil {
			if firstEr == nil {
				firstEr = err
			}
			results = append(results, rs...) // not written: kept for the last try
			return
		}
		wrote, final = true, b
	}
	for _, g := range batch.GroupByDomain(m.Items) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// The cache first, even past startBy: a read is no SMTP
			// session, and what goes back on the queue is then marked
			// as looked up.
			cached := batch.UsesCache(w.Cache, acct.Test, b.Mode, g.Domain)
			if cached && !m.CacheRead {
				var hits []evs.Result
				hits, g.Items = batch.FromCache(ctx, w.Cache, b, g.Items)
				if len(hits) > 0 {
					mu.Lock()
					results = append(results, hits...)
					if len(results) >= flushAt {
						flush()
					}
					mu.Unlock()
				}
				if len(g.Items) == 0 {
					return
				}
			}
			if !startBy.IsZero() && !time.Now().Before(startBy) {
				mu.Lock()
				left = append(left, g.Items...)
				mu.Unlock()
				return
			}
			a, err := w.admit(ctx, acct.Test, b.Mode, g)
			if err != nil {
				mu.Lock()
				defer mu.Unlock()
				if firstEr == nil {
					firstEr = err
				}
				return
			}
			if len(a.wait) > 0 {
				mu.Lock()
				parked = addParking(parked, a.key, a.notBefore, a.forSlot, a.wait)
				mu.Unlock()
			}
			if len(a.run) == 0 {
				return
			}
			g.Items = a.run
			o, err := w.Processor.VerifyGroup(ctx, startBy, acct.Test, b.Mode, g, m.Attempt)
			pausedUntil := a.done(ctx, o)
			batch.LearnGrey(ctx, w.Grey, m.Attempt, acct.Test, g.Domain, m.Waited, o.Results)
			var delay time.Duration
			if len(o.Retry) > 0 { // read the learned delay only when needed
				delay = w.greyDelay(ctx, m, acct.Test, g.Domain)
			}
			if cached {
				if err := batch.KeepResults(ctx, w.Cache, m.AccountID, o.Results); err != nil {
					w.logger().Warn("could not keep verdicts in the result cache", slog.String("batchId", m.BatchID), slog.String("error", err.Error()))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			results = append(results, o.Results...)
			if len(results) >= flushAt {
				flush()
			}
			retry = addRetry(retry, delay, o.Retry)
			if o.Throttled && a.key != "" {
				// Not asked: they wait for the provider's pause to end.
				parked = addParking(parked, a.key, pausedUntil, false, o.Left)
			} else {
				left = append(left, o.Left...)
			}
			if err != nil && firstEr == nil {
				firstEr = err
			}
		}()
	}
	wg.Wait()
	// Results first: once written, a redelivery of this message (a failed
	// send below, a lost invocation) asks no server about them again.
	if len(results) > 0 && (firstEr == nil || ctx.Err() == nil) {
		b, err := w.Store.PutResults(ctx, m.AccountID, m.BatchID, results, w.now())
		if err != nil {
			return errors.Join(firstEr, err)
		}
		wrote, final = true, b
	}
	if firstEr != nil {
		return firstEr
	}
	// Work that waits for its provider is parked in the store before the
	// message is acknowledged.
	if len(parked) > 0 {
		if err := w.park(ctx, m, parked); err != nil {
			return err
		}
	}
	// Out of time in this invocation: nothing was asked about left yet.
	// Greylisted addresses: after their domain's delay, next attempt.
	for _, q := range append([]retrying{{items: left}}, retry...) {
		if len(q.items) == 0 {
			continue
		}
		ms := Pack(m.AccountID, m.BatchID, q.items, w.packSize())
		for i := range ms {
			ms[i].CacheRead, ms[i].Attempt, ms[i].Waited = true, m.Attempt, m.Waited
			if q.next {
				ms[i].Attempt, ms[i].Waited = m.Attempt+1, m.Waited+q.delay
			}
		}
		if err := w.Queue.send(ctx, ms, int32(q.delay/time.Second)); err != nil {
			return err
		}
	}
	if wrote {
		w.finalized(ctx, final)
	}
	return nil
}

// maxSQSDelay is the longest delay SQS takes on a message.
const maxSQSDelay = 15 * time.Minute

// greyDelay is the SQS delay before the next attempt of a group of m's
// greylisted items at domain: batch.NextGreyDelay, capped at what SQS
// takes. Whole seconds, as SQS counts them, so that Waited adds up what
// the items really waited.
func (w *Worker) greyDelay(ctx context.Context, m Message, test bool, domain string) time.Duration {
	return min(batch.NextGreyDelay(ctx, w.Grey, w.GreyBackoff, m.Attempt, test, domain), maxSQSDelay).Truncate(time.Second)
}

// retrying is items sent back after one delay: greylisted ones, for their
// next attempt, or (next false) ones left for lack of time.
type retrying struct {
	items []evs.Item
	delay time.Duration
	next  bool
}

// addRetry merges items into rs by delay: the groups of one delay are
// packed into messages together, as they came.
func addRetry(rs []retrying, delay time.Duration, items []evs.Item) []retrying {
	if len(items) == 0 {
		return rs
	}
	for i := range rs {
		if rs[i].delay == delay {
			rs[i].items = append(rs[i].items, items...)
			return rs
		}
	}
	return append(rs, retrying{items: items, delay: delay, next: true})
}

// flushAt is how many results a worker gathers before it writes them: one
// DynamoDB transaction's worth (dynamostore writes 99 results and the
// batch's counters per TransactWriteItems).
const flushAt = 99

// ErrNoQueue is returned when the queue URL is not configured.
var ErrNoQueue = errors.New("sqsqueue: EVS_QUEUE_URL is not set")
