package batch

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// LocalStore is what `evs serve`'s batch work needs from the store: batch
// processing plus the list of unfinished batches to resume after a
// restart.
type LocalStore interface {
	Store
	UnfinishedBatches(ctx context.Context) ([]evs.Batch, error)
}

// LocalConfig shapes the lanes of `evs serve`'s LocalQueue.
type LocalConfig struct {
	Workers     int // domain groups verified at once (default 64)
	PerBatch    int // per batch, so one large batch cannot starve others (default 16)
	TestWorkers int // slots of the test-mode lane, apart from SMTP work (default 16)
	// PerAccount caps the slots of a lane one account holds (default three
	// quarters), so an account whose servers never answer cannot hold
	// every slot when another account arrives.
	PerAccount int
	Idle       func() // called when the queue runs dry: hand memory back
}

// ResultCache reuses an account's live verdicts; *cache.Cache is
// one. maxAge bounds the age of a reused verdict:
// 0 for no bound, evs.NoReuse to reuse none.
type ResultCache interface {
	Lookup(ctx context.Context, accountID string, mode evs.Mode, normalized, email string, maxAge time.Duration) (evs.Decision, bool)
	Keep(ctx context.Context, accountID string, ds ...evs.Decision) error
}

// LocalQueue is the Worker's Queue in `evs serve`'s process: messages wait
// in memory, in fair lanes, for a slot; delayed ones wait on timers. A
// restart plans every unfinished batch again from its pending items, so
// nothing is lost, and exactly-once writes count nothing twice.
type LocalQueue struct {
	cfg    LocalConfig
	st     LocalStore
	worker *Worker
	live   *lane // SMTP work of live accounts
	test   *lane // sandbox work of test-mode accounts

	mu      sync.Mutex
	ctx     context.Context
	tests   map[string]bool // account → test mode, as first read
	pending int             // messages ready, handled or waiting out a delay
	wg      sync.WaitGroup
}

// NewLocalQueue returns a LocalQueue over st that hands its messages to w,
// which it makes this process's (w's Queue and Store). Start makes it work.
func NewLocalQueue(st LocalStore, w *Worker, cfg LocalConfig) (*LocalQueue, error) {
	if st == nil || w == nil || w.Accounts == nil || w.Processor == nil || w.Processor.Engine == nil || w.Processor.Sandbox == nil || w.Polite == nil || w.Polite.Gate == nil {
		return nil, errors.New("batch: the local queue needs a store, accounts, an engine, a sandbox and a politeness gate")
	}
	w.Logger = cmp.Or(w.Logger, slog.Default())
	cfg.Workers = positiveOr(cfg.Workers, 64)
	cfg.PerBatch = positiveOr(cfg.PerBatch, 16)
	cfg.TestWorkers = positiveOr(cfg.TestWorkers, 16)
	w.Processor.SessionLimit = positiveOr(w.Processor.SessionLimit, 5*time.Minute)
	w.RetryBase = positiveOr(w.RetryBase, 200*time.Millisecond)
	w.RetryMax = positiveOr(w.RetryMax, 30*time.Second)
	share := func(slots int) int {
		if cfg.PerAccount > 0 {
			return min(cfg.PerAccount, slots)
		}
		return max(1, slots*3/4)
	}
	q := &LocalQueue{cfg: cfg, st: st, worker: w, tests: map[string]bool{}}
	w.Queue, w.Store = q, st
	// A batch is planned whole, in one message that Send divides: the
	// lanes, not plan windows, keep one batch from filling the slots
	// ahead of the others, and a domain's sessions run one after
	// another, its accept-all probe made once.
	w.PlanWindow, w.PackSize = math.MaxInt32, math.MaxInt32
	// A session waits for its slot in the step; a pause or a spent RCPT
	// budget sends the group back with a delay.
	w.Polite.Parking = nil
	q.live = evs.NewFair(cfg.Workers, share(cfg.Workers), cfg.PerBatch, q.handle)
	q.test = evs.NewFair(cfg.TestWorkers, share(cfg.TestWorkers), cfg.PerBatch, q.handle)
	return q, nil
}

// Start plans every unfinished batch again and accepts new ones until ctx
// ends.
func (q *LocalQueue) Start(ctx context.Context) error {
	q.mu.Lock()
	q.ctx = ctx
	q.mu.Unlock()
	var bs []evs.Batch
	for attempt := 0; ; attempt++ {
		var err error
		if bs, err = q.st.UnfinishedBatches(ctx); err == nil {
			break
		}
		if evs.ErrorCode(err) != evs.CodeUnavailable || attempt >= 5 {
			return err
		}
		// The store may be coming up with us: wait for it a little
		// before refusing to start.
		if !sleep(ctx, RetryDelay(q.worker.RetryBase, q.worker.RetryMax, attempt)) {
			return ctx.Err()
		}
	}
	for _, b := range bs {
		q.worker.Logger.Info("resuming batch", slog.String("batchId", b.ID), slog.String("state", string(b.State)))
		q.deliver(delivery{m: ReplanMessage(b)}, 0)
	}
	return nil
}

// Enqueue starts work on a batch that was just stored.
func (q *LocalQueue) Enqueue(ctx context.Context, b evs.Batch) error {
	return q.EnqueueItems(ctx, b, nil)
}

// EnqueueItems is Enqueue for a batch just stored with items: its plan
// packs them as given instead of reading them all back from the store.
func (q *LocalQueue) EnqueueItems(_ context.Context, b evs.Batch, items []evs.Item) error {
	m := PlanMessage(b)
	m.Items = items
	if !q.deliver(delivery{m: m}, 0) {
		return errStopped
	}
	return nil
}

// Send queues ms for the Worker once delay has passed. Live work goes out
// one message per domain group, so the lanes' caps count groups; test-mode
// work in messages of up to testPack addresses, each one write of results.
// A stopped queue queues nothing: the next start plans it again.
func (q *LocalQueue) Send(_ context.Context, ms []Message, delay time.Duration) error {
	ok := true
	for _, m := range ms {
		if m.Kind != KindWork || len(m.Items) == 0 {
			ok = q.deliver(delivery{m: m}, delay) && ok
			continue
		}
		var parts [][]evs.Item
		if q.lane(q.ctx, m.AccountID) == q.test {
			for _, p := range Pack(m.AccountID, m.BatchID, m.Items, testPack) {
				parts = append(parts, p.Items)
			}
		} else {
			for _, g := range GroupByDomain(m.Items) {
				parts = append(parts, g.Items)
			}
		}
		for _, items := range parts {
			one := m
			one.Items = items
			ok = q.deliver(delivery{m: one}, delay) && ok
		}
	}
	if !ok {
		return errStopped
	}
	return nil
}

// MaxDelay is unbounded: a delay waits on a timer of this process.
func (q *LocalQueue) MaxDelay() time.Duration { return math.MaxInt64 }

// DelayUnit is 0: delays are exact.
func (q *LocalQueue) DelayUnit() time.Duration { return 0 }

// Redelivers is false: messages live in this process's memory.
func (q *LocalQueue) Redelivers() bool { return false }

// SharedSlots is true: a work message holds a slot of its lane.
func (q *LocalQueue) SharedSlots() bool { return true }

// testPack is the most addresses of a test-mode work message.
const testPack = 1000

var errStopped = evs.Errorf(evs.CodeUnavailable, "The batch worker is not running.")

// Wait blocks until every message handling and timer has stopped (after
// ctx ended, or when all work is done).
func (q *LocalQueue) Wait() { q.wg.Wait() }

// deliver puts d in its lane once delay has passed, and reports false
// when the queue is not running.
func (q *LocalQueue) deliver(d delivery, delay time.Duration) bool {
	q.mu.Lock()
	ctx := q.ctx
	if ctx == nil || ctx.Err() != nil {
		q.mu.Unlock()
		return false
	}
	q.pending++
	q.mu.Unlock()
	if delay <= 0 {
		q.dispatch(ctx, d)
		return true
	}
	q.wg.Go(func() {
		if sleep(ctx, delay) {
			q.dispatch(ctx, d)
			return
		}
		// Shutdown: what waited stays pending in the store, and the next
		// start plans it again, so a SIGTERM never waits for a timer.
		q.finished()
	})
	return true
}

// dispatch hands d to the Worker: work through its lane, plans (a few
// store calls, which set a batch running) at once.
func (q *LocalQueue) dispatch(ctx context.Context, d delivery) {
	if d.m.Kind == KindWork {
		d.lane = q.lane(ctx, d.m.AccountID)
		d.lane.Push(d.m.AccountID, d.m.BatchID, d)
		return
	}
	q.handle(d)
}

// lane is the lane of an account's messages.
func (q *LocalQueue) lane(ctx context.Context, accountID string) *lane {
	q.mu.Lock()
	test, ok := q.tests[accountID]
	q.mu.Unlock()
	if !ok && accountID != "" {
		a, err := q.worker.Accounts.Account(ctx, accountID)
		if err != nil {
			return q.live // read again at the next message
		}
		test = a.Test
		q.mu.Lock()
		q.tests[accountID] = test
		q.mu.Unlock()
	}
	if test {
		return q.test
	}
	return q.live
}

// handle runs a delivery that its lane gave a slot. A failed handling is
// told to Fault and delivered again after a back-off, for as long as the
// service is up: no batch stays running with nothing happening.
func (q *LocalQueue) handle(d delivery) {
	q.wg.Go(func() {
		ctx := q.ctx
		err := ctx.Err()
		if err == nil {
			// Handled again after a failure: the addresses with results
			// are skipped, as on a redelivery.
			err = q.worker.Handle(ctx, d.m, d.fails > 0, time.Time{})
		}
		if d.lane != nil {
			d.lane.Done(d.m.AccountID, d.m.BatchID)
		}
		if err != nil && ctx.Err() == nil && evs.ErrorCode(err) != evs.CodeNotFound {
			if q.worker.Fault != nil {
				q.worker.Fault(err)
			}
			wait := RetryDelay(q.worker.RetryBase, q.worker.RetryMax, d.fails)
			q.worker.Logger.Warn("batch work interrupted; retrying", slog.String("kind", d.m.Kind), slog.String("batchId", d.m.BatchID),
				slog.String("accountId", d.m.AccountID), slog.Duration("retryIn", wait), slog.String("error", err.Error()))
			d.fails++
			q.deliver(d, wait)
		}
		q.finished()
	})
}

// finished counts a message out and tells Idle when none is left.
func (q *LocalQueue) finished() {
	q.mu.Lock()
	q.pending--
	idle := q.pending == 0
	q.mu.Unlock()
	if idle && q.cfg.Idle != nil {
		q.cfg.Idle()
	}
}
