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

// Batch work is message-driven: a plan message becomes work messages
// (addresses packed by domain) run through the step; PutResults is
// exactly-once, so a redelivered message never counts an address twice.

// Message kinds.
const (
	KindPlan = "plan"
	KindWork = "work"
	// KindSelfCheck runs the egress self-check; on AWS a schedule sends it,
	// since a Lambda has no process to run it from. It is never retried.
	KindSelfCheck = "selfcheck"
)

// Message is the body of every queue message.
type Message struct {
	Kind      string     `json:"kind"`
	AccountID string     `json:"accountId"`
	BatchID   string     `json:"batchId"`
	Items     []evs.Item `json:"items,omitempty"`
	Attempt   int        `json:"attempt,omitempty"`
	From      int        `json:"from,omitempty"`    // plan: the input's first position not planned yet
	Planned   int        `json:"planned,omitempty"` // plan: addresses earlier windows sent
	// Recheck is set on a plan that may find results in its input (a sweep's
	// re-plan, a restart, a redelivery), which it leaves out, and on its
	// work, which checks again. A new batch's plan reads its input unchecked.
	Recheck bool `json:"recheck,omitempty"`
	// CacheRead is set on work the worker sends on: its items were looked up
	// in the result cache already. A redelivery, which may have kept
	// verdicts before it failed, looks them up again.
	CacheRead bool `json:"cacheRead,omitempty"`
	// Waited is, on a greylisted retry, the delay its items waited since
	// their first deferral: what a retry that gets through teaches (learnGrey).
	Waited time.Duration    `json:"waited,omitempty"`
	Key    string           `json:"key,omitempty"`    // KindWake: politeness key whose parked work is due
	Export *store.ExportJob `json:"export,omitempty"` // KindExport: the job run to write
}

// Queue carries the Worker's messages (the LocalQueue in `evs serve`, SQS
// on AWS). The Worker asks what a queue does, never which queue it is.
type Queue interface {
	// Send queues ms, each delivered once delay (at most MaxDelay) has
	// passed; an error means none or only some may have been queued.
	Send(ctx context.Context, ms []Message, delay time.Duration) error
	// MaxDelay is the longest delay Send takes; a longer wait is chained.
	MaxDelay() time.Duration
	// DelayUnit is what Send counts delays in (0: exact), so a wait the
	// Worker adds up is counted as the queue counts it.
	DelayUnit() time.Duration
	// Redelivers tells whether a message whose handling failed or whose
	// process died is delivered again on its own (SQS). The Worker then
	// writes results as they come and leaves a cut-off message to that
	// redelivery; otherwise (the LocalQueue, in memory) it writes a
	// message's results once, at its end, and makes that write land.
	Redelivers() bool
	// SharedSlots tells whether a handling holds one of the few slots the
	// queue's other messages wait for (the LocalQueue's lanes): a cancelled
	// batch's handling then stops within a second by watching the store.
	// On SQS the watch would cost a store read a second per message.
	SharedSlots() bool
}

// MaxDelay is the longest delay SQS takes; longer waits are chained.
const MaxDelay = 15 * time.Minute

// PlanMessage is the message that starts a new batch: one small message,
// so creating a batch of 50,000 addresses stays one fast call.
func PlanMessage(b evs.Batch) Message {
	return Message{Kind: KindPlan, AccountID: b.AccountID, BatchID: b.ID}
}

// ReplanMessage plans a batch again from its first pending item.
func ReplanMessage(b evs.Batch) Message {
	m := PlanMessage(b)
	m.Recheck = true
	return m
}

// Worker handles the queue's messages, in the worker Lambda on AWS.
type Worker struct {
	Queue     Queue
	Store     Store
	Accounts  Accounts
	Processor *Processor
	Now       func() time.Time
	Logger    *slog.Logger
	// PackSize is the most addresses one work message carries (default
	// evs.PackSize): whole domains where they fit, so each domain sees one
	// SMTP connection and one accept-all probe.
	PackSize    int
	GreyBackoff time.Duration // first greylist retry delay (default 5 min)
	// Grey, when set, learns per domain how long its server deferred a
	// greylisted address, and a first retry there waits that long instead
	// of GreyBackoff.
	Grey              GreyFacts
	Concurrency       int            // domain groups of a message run at once (default 8)
	Cache             ResultCache    // account result cache; nil: none
	History           OutcomeHistory // reported outcomes that change verdicts; nil: none
	ShareDomainCounts bool           // score by every account's domain counts

	// PlanWindow is the most addresses of one batch planned into work
	// messages at a time (default 2000): a batch of 50,000 never fills the
	// queue ahead of everybody else's.
	PlanWindow int
	Deadline   time.Duration // a batch's time limit from its start; 0: none
	Polite     *Polite       // politeness across invocations; nil: none
	// Webhooks delivers batch events; nil drops them. One event's messages
	// are attempted at once, so a receiver that never answers delays no
	// other message by its timeout.
	Webhooks *webhook.Deliverer
	// WebhookSlots, when set, bounds one account's attempts in flight
	// across invocations to WebhookPerAccount (default
	// webhook.DefaultPerAccount).
	WebhookSlots      WebhookSlotStore
	WebhookPerAccount int
	Sweeper           SweepStore    // what the scheduled sweep looks at; nil drops sweeps
	StallAfter        time.Duration // no progress for this long: plan again (default 35 min)
	DeliveryGrace     time.Duration // webhook delivery overdue by this: queue it (default 10 min)
	// Reserve is how long before the invocation's deadline no new SMTP
	// session starts (default Processor.SessionLimit + 30 s), so Lambda
	// never cuts off finished work that a redelivery would probe again.
	Reserve time.Duration

	// On a Queue that does not redeliver, a refused write of results is
	// retried after RetryDelay(RetryBase, RetryMax) while the message keeps
	// its slot: the verdicts cost network work. Fault is told of each.
	RetryBase time.Duration
	RetryMax  time.Duration
	Fault     func(err error)

	SelfCheck func(ctx context.Context) // runs the egress self-check; nil drops it
	// Exports and ExportCSV write export jobs; ExportCSV is api.ExportCSV,
	// so rows are rendered by one function on every route. Nil drops them.
	Exports   ExportStore
	ExportCSV func(ctx context.Context, j store.ExportJob, w io.Writer) error
}

// StartBy is when the worker stops starting sessions in an invocation whose
// context ends at its deadline (zero without one): Reserve before it, but
// never more than half of what is left, so a short invocation still works.
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
		m.Recheck = m.Recheck || redelivered
		return w.plan(ctx, m)
	case KindWork:
		return w.work(ctx, m, redelivered || m.Recheck, startBy)
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

func (w *Worker) now() time.Time { return evs.Now(w.Now) }

// plan turns a window of a batch's pending items into work messages and,
// once half of it is done, plans the next: other batches' messages
// interleave instead of waiting behind all of them. "Done" is read from
// the counters, so the planner's reads grow with the batch, not its square.
func (w *Worker) plan(ctx context.Context, m Message) error {
	b, err := w.Store.Batch(ctx, m.AccountID, m.BatchID)
	if evs.ErrorCode(err) == evs.CodeNotFound {
		return nil // expired or never stored: nothing to do
	}
	if err != nil {
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
	window := w.PlanWindow
	if window <= 1 {
		window = 2000
	}
	if m.From > 0 && b.Counters.Processed < m.Planned-window/2 {
		// Half the last window is still in the queue: look again later.
		return w.Queue.Send(ctx, []Message{m}, planPoll)
	}
	// A plan may carry the batch's items (LocalQueue.EnqueueItems): they
	// were just stored, none has a result, and reading them back would
	// cost as much as verifying them in test mode.
	items, next := m.Items, -1
	if items == nil {
		if items, next, err = w.Store.InputItems(ctx, b.AccountID, b.ID, m.From, window); err != nil {
			return err
		}
		if m.Recheck {
			if items, err = w.Store.WithoutResults(ctx, b.AccountID, b.ID, items); err != nil {
				return err
			}
		}
	}
	if len(items) == 0 && next < 0 {
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
	for i := range msgs {
		msgs[i].Recheck = m.Recheck
	}
	if next >= 0 {
		msgs = append(msgs, Message{Kind: KindPlan, AccountID: m.AccountID, BatchID: m.BatchID,
			From: next, Planned: b.Counters.Processed + len(items), Recheck: m.Recheck})
	}
	return w.Queue.Send(ctx, msgs, 0)
}

// planPoll is how often a plan waiting for its batch's window to drain
// looks again.
const planPoll = 5 * time.Second

func (w *Worker) packSize() int { return positiveOr(w.PackSize, evs.PackSize) }

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

// work verifies a message's addresses and writes their results; a redelivery
// skips those that have one. Past startBy no session starts: the results so
// far are written and the rest goes back on the queue as a new message.
func (w *Worker) work(ctx context.Context, m Message, again bool, startBy time.Time) error {
	b, err := w.Store.Batch(ctx, m.AccountID, m.BatchID)
	if evs.ErrorCode(err) == evs.CodeNotFound {
		return nil
	}
	if err != nil {
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
	// flush writes the results so far, with mu held. On a queue that
	// redelivers, each transaction's worth (flushAt) is written at once, so
	// a worker that dies mid-message loses at most that many; otherwise a
	// message is one SQLite transaction written at its end.
	redelivers := w.Queue.Redelivers()
	flush := func() {
		if len(results) == 0 || (firstEr != nil && ctx.Err() != nil && redelivers) {
			return
		}
		rs := results
		results = nil
		b, err := w.write(ctx, m, rs)
		if err != nil {
			firstEr = cmp.Or(firstEr, err)
			results = append(results, rs...) // not written: kept for the last try
			return
		}
		wrote, final = true, b
	}
	step := w.stepper()
	for _, g := range GroupByDomain(m.Items) {
		sem <- struct{}{}
		wg.Go(func() {
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
			firstEr = cmp.Or(firstEr, d.err)
		})
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
	if err := w.park(ctx, m, parked); err != nil {
		return err
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

// write writes results of m. On a queue that does not redeliver m the write
// lands even while the service shuts down (the verdicts cost network work): a
// refusal is retried after a back-off until the store takes them or ctx ends.
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

// flushAt is one DynamoDB transaction's worth of results (99 plus the
// batch's counters).
const flushAt = 99

// stepper is the step of the Worker's groups: with politeness across
// invocations, sessions that cannot start are parked; in process (no
// Parking) a session waits for its slot, as sessions here end soon.
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
