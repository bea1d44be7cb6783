package batch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
)

// RunnerStore is what the local runner needs from the store: batch
// processing plus the list of unfinished batches to resume after a restart.
type RunnerStore interface {
	Store
	UnfinishedBatches(ctx context.Context) ([]evs.Batch, error)
}

// RunnerConfig configures the in-process worker of `evs serve`.
type RunnerConfig struct {
	Store    RunnerStore
	Accounts Accounts
	Engine   Verifier
	Sandbox  Verifier
	Now      func() time.Time
	Logger   *slog.Logger
	// Workers caps the domain groups verified at once across all batches
	// (default 64); PerBatch caps them per batch (default 16) so one large
	// batch cannot starve the others.
	Workers  int
	PerBatch int
	// FlushSize and FlushEvery decide when results are written: one
	// transaction per FlushSize results or per FlushEvery, whichever
	// comes first (defaults 1000 and 200 ms).
	FlushSize  int
	FlushEvery time.Duration
	// GreyBackoff is the first retry delay of greylisted addresses
	// (default 5 min, doubling); MaxGreyAttempts the tries in all (3).
	GreyBackoff     time.Duration
	MaxGreyAttempts int
	// Grey, when set, learns per domain the wait that let a greylisted
	// address through, and schedules a later batch's first retry there.
	Grey GreyFacts
	// PerConnection caps recipients per SMTP connection (default 50).
	PerConnection int
	// ExitRetry is the wait after our SMTP exit failed (default
	// DefaultExitRetry).
	ExitRetry time.Duration

	// TestWorkers is the slots of the test-mode lane (default 16): sandbox
	// work never waits behind SMTP work.
	TestWorkers int
	// PerAccount caps the slots of a lane one account holds (default three
	// quarters of the lane), so that an account whose receiving servers
	// never answer cannot hold every slot when another account arrives.
	PerAccount int
	// SessionLimit bounds each SMTP session of a domain group, the wait for
	// a connection slot included (default 5 min); a session past it ends,
	// with the rest of its group, as unknown/timeout.
	SessionLimit time.Duration
	// Deadline is a batch's time limit from its start (EVS_BATCH_DEADLINE;
	// 0 means none): what is left then ends as unknown/timeout.
	Deadline time.Duration
	// RetryBase and RetryMax shape the back-off after a store fault
	// (defaults 200 ms and 30 s): work is retried until the store answers.
	RetryBase time.Duration
	RetryMax  time.Duration
	// Idle, if set, is called whenever the last running batch has stopped:
	// the moment to hand a large batch's memory back to the system.
	Idle func()
	// Gate paces live full-mode sessions per mail provider and egress
	// address (nil: one in memory with the default limits, keyed by
	// domain). evs serve shares it with the engine's /v1/verify sessions.
	Gate *politeness.Gate
	// Cache, when set, reuses the account's live full-mode verdicts
	// instead of probing again, and keeps new ones (contract, section 12).
	Cache ResultCache
	// Fault, if set, is told of each store fault the worker meets: a
	// write of results that failed (kept for the next one) or a run that
	// was interrupted (started again); both are retried after a back-off.
	Fault func(err error)
}

// ResultCache reuses an account's live verdicts; *cache.Cache is
// one. maxAge bounds the age of a reused verdict:
// 0 for no bound, evs.NoReuse to reuse none.
type ResultCache interface {
	Lookup(ctx context.Context, accountID string, mode evs.Mode, normalized, email string, maxAge time.Duration) (evs.Decision, bool)
	Keep(ctx context.Context, accountID string, ds ...evs.Decision) error
}

// Runner runs batches in this process. Work is recorded in the store before
// a batch is acknowledged, so a restart resumes every unfinished batch from
// its pending items: nothing is lost, and the store's exactly-once writes
// mean nothing is counted twice.
type Runner struct {
	cfg  RunnerConfig
	step stepper
	live *lane // SMTP work of live accounts
	test *lane // sandbox work of test-mode accounts

	mu      sync.Mutex
	ctx     context.Context
	active  map[string]bool
	wg      sync.WaitGroup
	started bool
}

// NewRunner returns a runner; Start makes it work.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if cfg.Store == nil || cfg.Accounts == nil || cfg.Engine == nil || cfg.Sandbox == nil {
		return nil, errors.New("batch: runner needs a store, accounts, an engine and a sandbox")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 64
	}
	if cfg.PerBatch <= 0 {
		cfg.PerBatch = 16
	}
	if cfg.FlushSize <= 0 {
		cfg.FlushSize = 1000
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = 200 * time.Millisecond
	}
	if cfg.PerConnection <= 0 {
		cfg.PerConnection = 50
	}
	if cfg.TestWorkers <= 0 {
		cfg.TestWorkers = 16
	}
	if cfg.SessionLimit <= 0 {
		cfg.SessionLimit = 5 * time.Minute
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = 200 * time.Millisecond
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 30 * time.Second
	}
	if cfg.Gate == nil {
		cfg.Gate = &politeness.Gate{}
	}
	share := func(slots int) int {
		if cfg.PerAccount > 0 {
			return min(cfg.PerAccount, slots)
		}
		return max(1, slots*3/4)
	}
	r := &Runner{
		cfg: cfg,
		step: stepper{
			proc: &Processor{Engine: cfg.Engine, Sandbox: cfg.Sandbox, MaxGreyAttempts: cfg.MaxGreyAttempts,
				PerConnection: cfg.PerConnection, SessionLimit: cfg.SessionLimit, Now: cfg.Now, ExitRetry: cfg.ExitRetry},
			// A slot is waited for in the step: a session of this
			// process ends soon. A pause or a spent RCPT budget sends
			// the group back to the lane until it is over, freeing the
			// runner's slot.
			gate: cfg.Gate, waitForSlot: true, cache: cfg.Cache, grey: cfg.Grey, greyBackoff: cfg.GreyBackoff, logger: cfg.Logger,
		},
		active: map[string]bool{},
	}
	r.live = newLane(cfg.Workers, share(cfg.Workers), cfg.PerBatch, r.startTask)
	r.test = newLane(cfg.TestWorkers, share(cfg.TestWorkers), cfg.PerBatch, r.startTask)
	return r, nil
}

// Start resumes every unfinished batch and accepts new ones until ctx ends.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	r.ctx, r.started = ctx, true
	r.mu.Unlock()
	var bs []evs.Batch
	for attempt := 0; ; attempt++ {
		var err error
		if bs, err = r.cfg.Store.UnfinishedBatches(ctx); err == nil {
			break
		}
		if evs.ErrorCode(err) != evs.CodeUnavailable || attempt >= 5 {
			return err
		}
		// The store may be coming up with us: wait for it a little
		// before refusing to start.
		if !sleep(ctx, RetryDelay(r.cfg.RetryBase, r.cfg.RetryMax, attempt)) {
			return ctx.Err()
		}
	}
	for _, b := range bs {
		r.cfg.Logger.Info("resuming batch", slog.String("batchId", b.ID), slog.String("state", string(b.State)))
		r.launch(b, nil)
	}
	return nil
}

// Enqueue starts work on a batch that was just stored.
func (r *Runner) Enqueue(_ context.Context, b evs.Batch) error {
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if !started {
		return evs.Errorf(evs.CodeUnavailable, "The batch worker is not running.")
	}
	r.launch(b, nil)
	return nil
}

// EnqueueItems is Enqueue for a batch just stored with items, none of
// which has a result yet: its first run verifies them as given instead of
// reading all of them back from the store (at 50,000 addresses, a read
// that cost as much as verifying them in test mode). A run after a fault
// reads what is still pending, as always.
func (r *Runner) EnqueueItems(_ context.Context, b evs.Batch, items []evs.Item) error {
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if !started {
		return evs.Errorf(evs.CodeUnavailable, "The batch worker is not running.")
	}
	r.launch(b, items)
	return nil
}

// Wait blocks until every batch goroutine has stopped (after ctx ended, or
// when all work is done).
func (r *Runner) Wait() { r.wg.Wait() }

// launch runs b in its own goroutine unless it is running already; items,
// when not nil, are its pending items for the first run.
func (r *Runner) launch(b evs.Batch, items []evs.Item) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := b.AccountID + "/" + b.ID
	if r.active[key] || r.ctx == nil || r.ctx.Err() != nil {
		return
	}
	r.active[key] = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.active, key)
			idle := len(r.active) == 0
			r.mu.Unlock()
			if idle && r.cfg.Idle != nil {
				r.cfg.Idle()
			}
		}()
		r.supervise(r.ctx, b, items)
	}()
}

// supervise runs the batch until it is final. A run that a store fault
// interrupted is started again after a back-off, for as long as the
// service is up: no batch stays running with nothing happening. Each run
// starts from the items still pending in the store, so nothing is done
// twice.
func (r *Runner) supervise(ctx context.Context, b evs.Batch, items []evs.Item) {
	for attempt := 0; ; attempt++ {
		err := r.run(ctx, b, items)
		items = nil // a later run reads what is still pending
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			cur, berr := r.cfg.Store.Batch(ctx, b.AccountID, b.ID)
			if berr == nil && cur.State.Final() {
				return
			}
			if berr == nil {
				berr = errors.New("batch: the batch is not final after its run")
			}
			err = berr
		}
		if evs.ErrorCode(err) == evs.CodeNotFound {
			return // expired or deleted: nothing left to do
		}
		if r.cfg.Fault != nil {
			r.cfg.Fault(err)
		}
		d := RetryDelay(r.cfg.RetryBase, r.cfg.RetryMax, attempt)
		r.cfg.Logger.Warn("batch run interrupted; retrying", slog.String("batchId", b.ID),
			slog.String("accountId", b.AccountID), slog.Duration("retryIn", d), slog.String("error", err.Error()))
		if !sleep(ctx, d) {
			return
		}
	}
}

// batchRun is one run of one batch: its tasks, its writer and its
// bookkeeping in the lane.
type batchRun struct {
	b     evs.Batch
	ctx   context.Context
	w     *writer
	lane  *lane
	tasks sync.WaitGroup // queued, running or waiting out a back-off

	// ready and inflight belong to the lane and are guarded by its mu.
	ready    []task
	inflight int
}

// run processes every pending item of one batch: items, or when nil what
// the store holds as pending.
func (r *Runner) run(parent context.Context, b evs.Batch, items []evs.Item) error {
	acct, err := r.cfg.Accounts.Account(parent, b.AccountID)
	if err != nil {
		return err
	}
	if b.State == evs.StateQueued {
		b, err = r.cfg.Store.TransitionBatch(parent, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateRunning, "", r.cfg.Now())
		if err != nil {
			if evs.ErrorCode(err) == evs.CodeInvalidState {
				return nil // cancelled before it started
			}
			return err
		}
	}
	if PastDeadline(b, r.cfg.Deadline, r.cfg.Now()) {
		return r.expire(parent, b, acct.Test)
	}
	if items == nil {
		if items, err = AllPending(parent, r.cfg.Store, b.AccountID, b.ID); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var stopDeadline func() bool
	if r.cfg.Deadline > 0 {
		// The deadline stops the work in flight; expire then ends what is
		// left. The clock is the runner's, so the timer is only a wake-up.
		wait := b.CreatedAt.Add(r.cfg.Deadline).Sub(r.cfg.Now())
		stopDeadline = time.AfterFunc(max(wait, 0), cancel).Stop
	}
	w := newWriter(r, b, cancel)
	go w.loop(ctx)

	br := &batchRun{b: b, ctx: ctx, w: w, lane: r.live}
	if acct.Test {
		br.lane = r.test
	}
	br.lane.add(br)
	go func() {
		// Cancel, deadline or shutdown: tasks still waiting for a slot
		// will not run.
		<-ctx.Done()
		for n := br.lane.drop(br); n > 0; n-- {
			br.tasks.Done()
		}
	}()
	for _, g := range GroupByDomain(items) {
		// A domain's sessions run one after another in one task: polite to
		// its servers, and its accept-all probe is made once.
		r.submit(task{run: br, b: b, test: acct.Test, group: g})
	}
	br.tasks.Wait()
	br.lane.remove(br)
	if stopDeadline != nil {
		stopDeadline()
	}
	if err := w.close(parent); err != nil {
		return err
	}
	if parent.Err() == nil && PastDeadline(b, r.cfg.Deadline, r.cfg.Now()) {
		return r.expire(parent, b, acct.Test)
	}
	return nil
}

// submit queues a task in its batch's lane.
func (r *Runner) submit(t task) {
	t.run.tasks.Add(1)
	if t.run.ctx.Err() != nil {
		t.run.tasks.Done()
		return
	}
	t.run.lane.push(t)
}

// startTask runs a task that the lane gave a slot.
func (r *Runner) startTask(t task) {
	go func() {
		br := t.run
		defer br.tasks.Done()
		var d stepDone
		if br.ctx.Err() == nil {
			d = r.step.run(br.ctx, t, time.Time{})
			br.w.add(br.ctx, d.results)
		}
		br.lane.done(t)
		if d.err != nil {
			// Cancel, shutdown or the batch deadline cut it short: what
			// is left stays pending for the next run or for expire.
			return
		}
		// Not asked yet (the provider is paused, or the group was more
		// than a window's RCPT budget): the same attempt, after the wait.
		// Greylisted: the next attempt, after the back-off. A shutdown or
		// cancel ends the waits: the addresses stay pending in the store
		// and a restart picks them up, so a SIGTERM never waits minutes
		// for a greylist timer.
		r.after(t, d.wait, r.step.gate.Until(d.until), false)
		r.after(t, d.left, 0, false)
		r.after(t, d.retry, d.retryIn, true)
	}()
}

// after submits items of t's group again once delay has passed: at the
// next attempt if next, else at the same one.
func (r *Runner) after(t task, items []evs.Item, delay time.Duration, next bool) {
	if len(items) == 0 {
		return
	}
	br := t.run
	n := task{run: br, b: t.b, test: t.test, group: Group{Domain: t.group.Domain, Items: items}, attempt: t.attempt, cacheRead: true, waited: t.waited}
	if next {
		n.attempt, n.waited = t.attempt+1, t.waited+delay
	}
	br.tasks.Add(1)
	go func() {
		defer br.tasks.Done()
		if sleep(br.ctx, delay) {
			r.submit(n)
		}
	}()
}

// expire completes a batch past its deadline: every item still pending
// ends as unknown/timeout.
func (r *Runner) expire(ctx context.Context, b evs.Batch, test bool) error {
	r.cfg.Logger.Info("batch deadline passed; the pending addresses end as unknown/timeout",
		slog.String("batchId", b.ID), slog.String("accountId", b.AccountID))
	return Expire(ctx, r.cfg.Store, b, test, r.cfg.Now, r.cfg.FlushSize, nil)
}

// writer collects results and writes them in large transactions. A write
// that fails keeps its results for the next one, after a back-off: verdicts
// cost network work and are not dropped while the store is down.
type writer struct {
	r    *Runner
	b    evs.Batch
	stop context.CancelFunc
	mu   sync.Mutex
	// buf holds the results not written yet as the tasks handed them
	// over, n of them in all: gathering them into one slice only at the
	// write copies each result once, where appending to a growing slice
	// copied it several times.
	buf  [][]evs.Result
	n    int
	kick chan struct{}
	// written is closed, and replaced, after each successful write: a
	// task waiting for room in buf waits on it.
	written chan struct{}
	done    chan struct{}
	closed  chan struct{}
	fails   int       // consecutive failed writes
	after   time.Time // no write before this, after a failure
}

func newWriter(r *Runner, b evs.Batch, stop context.CancelFunc) *writer {
	return &writer{r: r, b: b, stop: stop, kick: make(chan struct{}, 1), written: make(chan struct{}),
		done: make(chan struct{}), closed: make(chan struct{})}
}

// bufferedFlushes is how many writes' worth of results a batch may have
// waiting: a task with more to hand over waits for a write. Verdicts come
// faster than one writer stores them (test mode makes them instantly),
// and without the wait a few 50,000-address batches held hundreds of
// megabytes of results waiting for the store.
const bufferedFlushes = 2

// add hands results over to be written, first waiting, while the buffer
// is full, for a write to make room (or for ctx to end: then close writes
// them).
func (w *writer) add(ctx context.Context, rs []evs.Result) {
	if len(rs) == 0 {
		return
	}
	for {
		w.mu.Lock()
		if w.n < bufferedFlushes*w.r.cfg.FlushSize || ctx.Err() != nil {
			w.buf = append(w.buf, rs)
			w.n += len(rs)
			full := w.n >= w.r.cfg.FlushSize
			w.mu.Unlock()
			if full {
				w.wake()
			}
			return
		}
		written := w.written
		w.mu.Unlock()
		w.wake()
		select {
		case <-written:
		case <-ctx.Done():
		}
	}
}

// wake asks the loop for a write now.
func (w *writer) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *writer) loop(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(w.r.cfg.FlushEvery)
	defer t.Stop()
	polls := 0
	for {
		select {
		case <-w.closed:
			return
		case <-ctx.Done():
			// Shutdown, cancel or deadline: close writes what is left.
			return
		case <-w.kick:
		case <-t.C:
			polls++
		}
		wrote, _ := w.flush(false)
		if !wrote && polls%5 == 0 {
			// No results for a while (slow SMTP): still notice a cancel.
			if b, err := w.r.cfg.Store.Batch(ctx, w.b.AccountID, w.b.ID); err == nil && b.State.Final() {
				w.stop()
			}
		}
	}
}

// flush writes what is buffered in one step and reports whether anything
// was written. After a failure it waits out the back-off unless force.
func (w *writer) flush(force bool) (bool, error) {
	w.mu.Lock()
	if !force && time.Now().Before(w.after) {
		w.mu.Unlock()
		return false, nil
	}
	chunks, n := w.buf, w.n
	w.buf, w.n = nil, 0
	w.mu.Unlock()
	rs := make([]evs.Result, 0, n)
	for _, c := range chunks {
		rs = append(rs, c...)
	}
	if len(rs) == 0 {
		return false, nil
	}
	// The write must land even while shutting down: these verdicts cost
	// network work.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := w.r.cfg.Store.PutResults(ctx, w.b.AccountID, w.b.ID, rs, w.r.cfg.Now())
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		// Keep them, in front of what came meanwhile, for the next try.
		w.buf = append([][]evs.Result{rs}, w.buf...)
		w.n += len(rs)
		w.after = time.Now().Add(RetryDelay(w.r.cfg.RetryBase, w.r.cfg.RetryMax, w.fails))
		w.fails++
		if w.r.cfg.Fault != nil {
			w.r.cfg.Fault(err)
		}
		if w.fails == 1 || w.fails%10 == 0 {
			logErr(w.r.cfg.Logger, "could not write results; retrying with back-off", w.b, err)
		}
		return false, err
	}
	w.fails = 0
	close(w.written)
	w.written = make(chan struct{})
	if b.State.Final() && b.State != evs.StateCompleted {
		w.stop() // cancelled or failed: stop new work promptly
	}
	return true, nil
}

// close stops the loop and writes what is left, retrying with back-off
// until the store answers or ctx (the service) ends; then the results not
// written stay pending in the store and are redone at the next start.
func (w *writer) close(ctx context.Context) error {
	close(w.closed)
	<-w.done
	for attempt := 0; ; attempt++ {
		_, err := w.flush(true)
		if err == nil {
			w.mu.Lock()
			left := w.n
			w.mu.Unlock()
			if left == 0 {
				return nil
			}
			continue
		}
		if ctx.Err() != nil || evs.ErrorCode(err) != evs.CodeUnavailable {
			logErr(w.r.cfg.Logger, "could not write results; they stay pending and are redone", w.b, err)
			return err
		}
		if !sleep(ctx, RetryDelay(w.r.cfg.RetryBase, w.r.cfg.RetryMax, attempt)) {
			return ctx.Err()
		}
	}
}
