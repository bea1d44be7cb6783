package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/webhook"
)

// The one orchestration of batch work, message-driven: a new batch queues
// one "plan" message; the Worker turns a plan into work messages
// (addresses packed by domain) and runs each work message's groups through
// the step (step.go), sending greylisted addresses back with a delay and
// parking, or on the LocalQueue delaying, work that waits for its
// provider. Results are written by the store's exactly-once PutResults,
// so a redelivered message never counts an address twice. On AWS the
// requests function queues the plans on SQS and the worker function
// handles them; in `evs serve` the LocalQueue does both in process.

// Message kinds.
const (
	KindPlan = "plan"
	KindWork = "work"
	// KindSelfCheck runs the egress self-check (Worker.SelfCheck): on
	// AWS an hourly schedule sends it (template.yaml, SelfCheckSchedule),
	// since a Lambda has no process of its own to run it from. Its
	// findings are metrics, not state: a failed lookup is in them, and
	// the message is never retried.
	KindSelfCheck = "selfcheck"
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
	// that gets through teaches about the domain (see learnGrey).
	Waited time.Duration `json:"waited,omitempty"`
	// Key is, on a KindWake message, the politeness key whose parked
	// work is due.
	Key string `json:"key,omitempty"`
	// Export is, on a KindExport message, the run of the export job to
	// write (export.go).
	Export *store.ExportJob `json:"export,omitempty"`
}

// Queue carries the Worker's messages: the LocalQueue in `evs serve`'s
// process, SQS in the worker Lambda (app.Queue). Besides sending, a
// queue declares what it does with a delay and with a message whose
// handling fails, and what a handling holds while it runs; the Worker
// asks these, never which queue it runs on.
type Queue interface {
	// Send queues ms, each delivered once delay (at most MaxDelay) has
	// passed; an error means none or only some may have been queued.
	Send(ctx context.Context, ms []Message, delay time.Duration) error
	// MaxDelay is the longest delay Send takes: a longer wait is chained
	// (SQS: the MaxDelay constant; the LocalQueue: unbounded, a timer
	// of its process).
	MaxDelay() time.Duration
	// DelayUnit is what Send counts delays in: a delay waits a whole
	// number of units, so a wait the Worker adds up is counted as the
	// queue counts it (SQS: a second; 0: delays are exact, as on the
	// LocalQueue).
	DelayUnit() time.Duration
	// Redelivers tells whether a message outlives its handling: one
	// whose handling failed, or whose process died, is delivered again
	// by the queue on its own (SQS, after its visibility timeout). The
	// Worker then writes results as they come, so a death loses few of
	// them, and leaves a message cut off with its context to that
	// redelivery. A queue that does not (the LocalQueue, in memory) dies
	// with its process, the work resuming from the store's pending items
	// at the next start, and hands a failed message out again only while
	// it runs: the Worker writes a message's results once, at its end,
	// and makes that write land, retried in place and while the context
	// ends too, since what it does not write is asked again.
	Redelivers() bool
	// SharedSlots tells whether a handling holds, for as long as it runs,
	// one of the few slots that the queue's other messages wait for (the
	// LocalQueue's lanes, whose handlings have no deadline, and the
	// sessions its steps wait for in process): a handling whose batch is
	// cancelled then stops its sessions within a second, watching the
	// store. SQS hands each message to an invocation that ends within
	// the function's timeout, where a watch would cost a store read a
	// second per message.
	SharedSlots() bool
}

// MaxDelay is the longest delay SQS takes (sqsqueue.Queue's MaxDelay);
// longer waits are chained.
const MaxDelay = 15 * time.Minute

// PlanMessage is the message that starts a new batch: one small message,
// so creating a batch of 50,000 addresses stays one fast call.
func PlanMessage(b evs.Batch) Message {
	return Message{Kind: KindPlan, AccountID: b.AccountID, BatchID: b.ID}
}

// WorkerStore is what the Worker keeps batches in: batch processing's
// part, and which of a redelivered message's items already have results.
type WorkerStore interface {
	Store
	WithoutResults(ctx context.Context, accountID, id string, items []evs.Item) ([]evs.Item, error)
}

// Worker handles the queue's messages, in the worker Lambda on AWS.
type Worker struct {
	Queue     Queue
	Store     WorkerStore
	Accounts  Accounts
	Processor *Processor
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
	// GreyBackoff (see greyDelay; dynamostore.DomainFacts shares it
	// across invocations).
	Grey GreyFacts
	// Concurrency is how many domain groups of a message run at once
	// (default 8).
	Concurrency int
	// Cache, when set, is the account result cache (contract, section
	// 12): a live full-mode group's items whose verdict it holds fresh,
	// within the batch's maxAge, become results without SMTP, and new
	// verdicts are kept (see fromCache).
	Cache ResultCache
	// History, when set, holds the accounts' reported outcomes, which
	// change verdicts by verify.ApplyHistory (history.go).
	History OutcomeHistory
	// ShareDomainCounts scores accept-all and unchecked mailboxes by every
	// account's counts for their domains (EVS_OUTCOME_SHARE_DOMAINS).
	ShareDomainCounts bool

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

	// On a Queue that does not redeliver (the LocalQueue), a write of
	// results the store refuses is retried, after RetryDelay(RetryBase,
	// RetryMax), while the message keeps its slot, instead of failing the
	// message: the verdicts cost network work, and the queue's slots then
	// bound how many wait for the store. Fault, if set, is told of each
	// refused write.
	RetryBase time.Duration
	RetryMax  time.Duration
	Fault     func(err error)

	// SelfCheck, when set, runs the egress self-check (KindSelfCheck
	// messages; verify.CheckEgress) and reports its findings; nil drops
	// the messages.
	SelfCheck func(ctx context.Context)

	// Exports and ExportCSV write export jobs (KindExport messages,
	// export.go): ExportCSV writes the CSV of a job's batch and filters
	// (api.ExportCSV, wired by the composition root, so the rows are
	// rendered by one function on every route). Nil drops the messages.
	Exports   ExportStore
	ExportCSV func(ctx context.Context, j store.ExportJob, w io.Writer) error
}

// StartBy is when the worker stops starting sessions in an invocation
// whose context ends at its deadline (the zero time without one): Reserve
// before it, but never more than half of what is left, so an invocation
// shorter than the reserve still gets work done.
func (w *Worker) StartBy(ctx context.Context) time.Time {
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

// Handle processes one message; redelivered says the queue may have
// handed it to a worker before, startBy is the invocation's StartBy. An
// error leaves the message to be delivered again.
func (w *Worker) Handle(ctx context.Context, m Message, redelivered bool, startBy time.Time) error {
	switch m.Kind {
	case KindPlan:
		return w.plan(ctx, m)
	case KindWork:
		return w.work(ctx, m, redelivered, startBy)
	case KindUnparked:
		// Parked once: a copy may have run before a failure, so the
		// addresses with results are skipped, as on a redelivery.
		return w.work(ctx, m, true, startBy)
	case KindWake:
		return w.wake(ctx, m)
	case KindSweep:
		return w.sweep(ctx)
	case KindWebhook:
		return w.deliver(ctx, m)
	case KindExport:
		return w.export(ctx, m)
	case KindSelfCheck:
		if w.SelfCheck != nil {
			w.SelfCheck(ctx)
		}
		return nil
	}
	return fmt.Errorf("batch: unknown message kind %q", m.Kind)
}

func (w *Worker) logger() *slog.Logger { return cmp.Or(w.Logger, slog.Default()) }

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
	if PastDeadline(b, w.Deadline, w.now()) {
		return w.expire(ctx, b)
	}
	window := w.planWindow()
	if m.From > 0 && b.Counters.Processed < m.Planned-window/2 {
		// Half the last window is still in the queue: look again later.
		return w.Queue.Send(ctx, []Message{m}, planPoll)
	}
	// A plan may carry the batch's items (LocalQueue.EnqueueItems): they
	// were just stored, none has a result, and reading them back would
	// cost as much as verifying them in test mode.
	items := m.Items
	if items == nil {
		if items, err = w.Store.PendingItems(ctx, b.AccountID, b.ID, m.From-1, window); err != nil {
			return err
		}
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
	if m.Items == nil && len(items) == window {
		msgs = append(msgs, Message{Kind: KindPlan, AccountID: m.AccountID, BatchID: m.BatchID,
			From: items[len(items)-1].Seq + 1, Planned: b.Counters.Processed + len(items)})
	}
	return w.Queue.Send(ctx, msgs, 0)
}

// planPoll is how often a plan waiting for its batch's window to drain
// looks again.
const planPoll = 5 * time.Second

func (w *Worker) planWindow() int {
	if w.PlanWindow <= 1 {
		return 2000
	}
	return w.PlanWindow
}

func (w *Worker) packSize() int { return positiveOr(w.PackSize, 200) }

// positiveOr is v when it is set (positive), else def: the rule of every
// limit and duration the Worker and Processor default.
func positiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
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
	for _, g := range GroupByDomain(items) {
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
	if PastDeadline(b, w.Deadline, w.now()) {
		return w.timeout(ctx, b, m.Items, acct.Test)
	}
	if again {
		if m.Items, err = w.Store.WithoutResults(ctx, m.AccountID, m.BatchID, m.Items); err != nil {
			return err
		}
		if len(m.Items) == 0 {
			return nil
		}
	}
	// The batch's deadline stops the sessions under way; what they
	// answered is still written, with ctx, and the rest ends as timeouts.
	stepCtx, stop := context.WithCancel(ctx)
	defer stop()
	if w.Deadline > 0 {
		stepCtx, stop = context.WithTimeout(stepCtx, b.CreatedAt.Add(w.Deadline).Sub(w.now()))
		defer stop()
	}
	var cancelled atomic.Bool
	if w.Queue.SharedSlots() && !acct.Test {
		// So does a cancel where the sessions hold slots that other
		// batches wait for (the sandbox answers at once).
		go w.watch(stepCtx, m, stop, &cancelled)
	}
	conc := positiveOr(w.Concurrency, 8)
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
	// flush writes the results gathered so far, with mu held. On a queue
	// that redelivers, results are written as soon as a transaction's
	// worth (flushAt) is done, not only at the end: a worker that dies
	// mid-message (out of memory, a crash) loses at most that many, and
	// the redelivery asks no server again about the rest. It costs no
	// extra transaction on DynamoDB. Where a crash loses the queue too
	// (the LocalQueue), each message is one SQLite transaction, written
	// at its end, and lands while ctx ends too (write).
	redelivers := w.Queue.Redelivers()
	flush := func() {
		if len(results) == 0 || (firstEr != nil && ctx.Err() != nil && redelivers) {
			return
		}
		rs := results
		results = nil
		b, err := w.write(ctx, m, rs)
		if err != nil {
			if firstEr == nil {
				firstEr = err
			}
			results = append(results, rs...) // not written: kept for the last try
			return
		}
		wrote, final = true, b
	}
	step := w.stepper()
	for _, g := range GroupByDomain(m.Items) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d := step.run(stepCtx, task{b: b, test: acct.Test, group: g, attempt: m.Attempt, cacheRead: m.CacheRead, waited: m.Waited}, startBy)
			d.results = w.withHistory(stepCtx, b, d.results)
			if d.released && w.parks() {
				// The slot that went back starts the oldest work waiting.
				w.unpark(context.WithoutCancel(ctx), d.key, 1)
			}
			mu.Lock()
			defer mu.Unlock()
			results = append(results, d.results...)
			if len(results) >= flushAt && redelivers {
				flush()
			}
			retry = addRetry(retry, w.greyDelay(d.retryIn), d.retry)
			if d.key != "" && w.parks() {
				until := d.until
				if dl := b.CreatedAt.Add(w.Deadline); w.Deadline > 0 && dl.Before(until) {
					until = dl // no wait outlives the batch, as with a delay below
				}
				parked = addParking(parked, d.key, until, d.forSlot, d.wait)
			} else if len(d.wait) > 0 {
				// Throttled, or (in this process) out of RCPT budget, with
				// no parking: back on the queue after the wait.
				retry = append(retry, retrying{items: d.wait, delay: min(step.until(d.until), w.Queue.MaxDelay())})
			}
			left = append(left, d.left...)
			if d.err != nil && firstEr == nil {
				firstEr = d.err
			}
		}()
	}
	wg.Wait()
	// Results first: once written, a redelivery of this message (a failed
	// send below, a lost invocation) asks no server about them again.
	if len(results) > 0 && (firstEr == nil || ctx.Err() == nil || !redelivers) {
		b, err := w.write(ctx, m, results)
		if err != nil {
			return errors.Join(firstEr, err)
		}
		wrote, final = true, b
	}
	if cancelled.Load() {
		return nil
	}
	if firstEr != nil && stepCtx.Err() != nil && ctx.Err() == nil && PastDeadline(b, w.Deadline, w.now()) {
		// Cut short by the batch's deadline: what is left ends now.
		return w.timeout(ctx, b, m.Items, acct.Test)
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
		delay := q.delay
		if w.Deadline > 0 {
			// No wait outlives the batch: at its deadline the message
			// ends its items as unknown/timeout.
			delay = min(delay, max(b.CreatedAt.Add(w.Deadline).Sub(w.now()), 0))
		}
		if err := w.Queue.Send(ctx, ms, delay); err != nil {
			return err
		}
	}
	if wrote {
		w.finalized(ctx, final)
	}
	return nil
}

// watch calls stop, and sets final, once m's batch is final, looking every
// second until ctx ends.
func (w *Worker) watch(ctx context.Context, m Message, stop func(), final *atomic.Bool) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if b, err := w.Store.Batch(ctx, m.AccountID, m.BatchID); err == nil && b.State.Final() {
			final.Store(true)
			stop()
			return
		}
	}
}

// timeout ends items of b, past its deadline, as unknown/timeout; those
// with a result keep it (PutResults is exactly-once).
func (w *Worker) timeout(ctx context.Context, b evs.Batch, items []evs.Item, test bool) error {
	rs := TimeoutResults(items, b.Mode, test, DetailDeadline, w.now())
	final, err := w.Store.PutResults(ctx, b.AccountID, b.ID, rs, w.now())
	if err == nil {
		w.finalized(ctx, final)
	}
	return err
}

// write writes results of m. On a queue that does not redeliver m, the
// write lands even while the service shuts down (these verdicts cost
// network work), and a refusal is retried after a back-off until the
// store takes them or ctx ends.
func (w *Worker) write(ctx context.Context, m Message, rs []evs.Result) (evs.Batch, error) {
	if w.Queue.Redelivers() {
		return w.Store.PutResults(ctx, m.AccountID, m.BatchID, rs, w.now())
	}
	for n := 0; ; n++ {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		b, err := w.Store.PutResults(wctx, m.AccountID, m.BatchID, rs, w.now())
		cancel()
		if err == nil || evs.ErrorCode(err) == evs.CodeNotFound {
			return b, err
		}
		if w.Fault != nil {
			w.Fault(err)
		}
		if n == 0 || n%10 == 9 {
			w.logger().Warn("could not write results; retrying with back-off", slog.String("batchId", m.BatchID),
				slog.String("accountId", m.AccountID), slog.String("error", err.Error()))
		}
		if !sleep(ctx, RetryDelay(w.RetryBase, w.RetryMax, n)) {
			return b, err
		}
	}
}

// parks tells whether waiting work is parked in a politeness store.
func (w *Worker) parks() bool {
	p := w.Polite
	return p != nil && p.Gate != nil && p.Gate.State != nil && p.Gate.MX != nil && p.Parking != nil
}

// delay is the queue delay of a wait of d: at most the Queue's MaxDelay
// (a longer wait is chained: the message that comes looks again), rounded
// up to its DelayUnit, so that the message never comes before d is over.
func (w *Worker) delay(d time.Duration) time.Duration {
	d = min(max(d, 0), w.Queue.MaxDelay())
	if u := w.Queue.DelayUnit(); u > 0 {
		d = (d + u - 1).Truncate(u)
	}
	return d
}

// greyDelay is the queue delay of a greylisted retry: in the Queue's
// whole units (SQS's seconds), as it counts them, so that Waited adds up
// what the items really waited.
func (w *Worker) greyDelay(d time.Duration) time.Duration {
	return min(d, w.Queue.MaxDelay()).Truncate(w.Queue.DelayUnit())
}

// retrying is items sent back after one delay: greylisted ones, for their
// next attempt, or (next false) ones left for lack of time.
type retrying struct {
	items []evs.Item
	delay time.Duration
	next  bool
}

// addRetry merges greylisted items into rs by delay: the groups of one
// delay are packed into messages together, as they came (never with
// items waiting at the same attempt).
func addRetry(rs []retrying, delay time.Duration, items []evs.Item) []retrying {
	if len(items) == 0 {
		return rs
	}
	for i := range rs {
		if rs[i].next && rs[i].delay == delay {
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

// stepper is the step of the Worker's groups: sessions that cannot start
// now are parked, not waited for, when politeness across invocations is
// configured; in this process (a Polite with no Parking) a session waits
// for its slot in the step, as a session of this process ends soon.
func (w *Worker) stepper() stepper {
	s := stepper{proc: w.Processor, cache: w.Cache, grey: w.Grey, greyBackoff: w.GreyBackoff, logger: w.logger()}
	switch p := w.Polite; {
	case w.parks():
		s.gate = p.Gate
	case p != nil && p.Gate != nil && p.Parking == nil:
		s.gate, s.waitForSlot = p.Gate, true
	}
	return s
}
