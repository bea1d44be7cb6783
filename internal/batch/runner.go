package batch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
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
	// PerConnection caps recipients per SMTP connection (default 50).
	PerConnection int
	// Idle, if set, is called whenever the last running batch has stopped:
	// the moment to hand a large batch's memory back to the system.
	Idle func()
}

// Runner runs batches in this process. Work is recorded in the store before
// a batch is acknowledged, so a restart resumes every unfinished batch from
// its pending items: nothing is lost, and the store's exactly-once writes
// mean nothing is counted twice.
type Runner struct {
	cfg  RunnerConfig
	proc *Processor
	all  chan struct{}

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
	return &Runner{
		cfg:    cfg,
		proc:   &Processor{Engine: cfg.Engine, Sandbox: cfg.Sandbox, MaxGreyAttempts: cfg.MaxGreyAttempts, PerConnection: cfg.PerConnection},
		all:    make(chan struct{}, cfg.Workers),
		active: map[string]bool{},
	}, nil
}

// Start resumes every unfinished batch and accepts new ones until ctx ends.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	r.ctx, r.started = ctx, true
	r.mu.Unlock()
	bs, err := r.cfg.Store.UnfinishedBatches(ctx)
	if err != nil {
		return err
	}
	for _, b := range bs {
		r.cfg.Logger.Info("resuming batch", slog.String("batchId", b.ID), slog.String("state", string(b.State)))
		r.launch(b)
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
	r.launch(b)
	return nil
}

// Wait blocks until every batch goroutine has stopped (after ctx ended, or
// when all work is done).
func (r *Runner) Wait() { r.wg.Wait() }

func (r *Runner) launch(b evs.Batch) {
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
		if err := r.run(r.ctx, b); err != nil && r.ctx.Err() == nil {
			logErr(r.cfg.Logger, "batch run failed", b, err)
		}
	}()
}

// run processes every pending item of one batch.
func (r *Runner) run(parent context.Context, b evs.Batch) error {
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
	items, err := AllPending(parent, r.cfg.Store, b.AccountID, b.ID)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	w := newWriter(r, b, cancel)
	go w.loop(ctx)

	mode := evs.Mode(b.Mode)
	memo := verify.NewCatchAllMemo()
	per := make(chan struct{}, r.cfg.PerBatch)
	var work sync.WaitGroup
	var submit func(g Group, attempt int)
	submit = func(g Group, attempt int) {
		work.Add(1)
		go func() {
			defer work.Done()
			select {
			case per <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case r.all <- struct{}{}:
			case <-ctx.Done():
				<-per
				return
			}
			results, retry, err := r.proc.Verify(ctx, acct.Test, mode, g, attempt, memo)
			<-r.all
			<-per
			w.add(results)
			if err != nil || len(retry) == 0 {
				return
			}
			// Wait out the back-off, but not past shutdown or cancel: the
			// addresses stay pending in the store and a restart picks them
			// up, so a SIGTERM never waits minutes for a greylist timer.
			delay := Backoff(r.cfg.GreyBackoff, attempt+1)
			work.Add(1)
			go func() {
				defer work.Done()
				t := time.NewTimer(delay)
				defer t.Stop()
				select {
				case <-t.C:
					submit(Group{Domain: g.Domain, Items: retry}, attempt+1)
				case <-ctx.Done():
				}
			}()
		}()
	}
	for _, g := range GroupByDomain(items) {
		submit(g, 0)
	}
	work.Wait()
	return w.close()
}

// writer collects results and writes them in large transactions.
type writer struct {
	r      *Runner
	b      evs.Batch
	stop   context.CancelFunc
	mu     sync.Mutex
	buf    []evs.Result
	kick   chan struct{}
	done   chan struct{}
	closed chan struct{}
	err    error
}

func newWriter(r *Runner, b evs.Batch, stop context.CancelFunc) *writer {
	return &writer{r: r, b: b, stop: stop, kick: make(chan struct{}, 1), done: make(chan struct{}), closed: make(chan struct{})}
}

func (w *writer) add(rs []evs.Result) {
	if len(rs) == 0 {
		return
	}
	w.mu.Lock()
	w.buf = append(w.buf, rs...)
	full := len(w.buf) >= w.r.cfg.FlushSize
	w.mu.Unlock()
	if full {
		select {
		case w.kick <- struct{}{}:
		default:
		}
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
			w.flush()
			return
		case <-ctx.Done():
			// Shutdown or cancel: what is verified is kept.
			w.flush()
			return
		case <-w.kick:
		case <-t.C:
			polls++
		}
		wrote := w.flush()
		if !wrote && polls%5 == 0 {
			// No results for a while (slow SMTP): still notice a cancel.
			if b, err := w.r.cfg.Store.Batch(ctx, w.b.AccountID, w.b.ID); err == nil && b.State.Final() {
				w.stop()
			}
		}
	}
}

// flush writes what is buffered in one step, retrying a store fault a few
// times; it reports whether anything was written.
func (w *writer) flush() bool {
	w.mu.Lock()
	rs := w.buf
	w.buf = nil
	w.mu.Unlock()
	if len(rs) == 0 {
		return false
	}
	// The write must land even while shutting down: these verdicts cost
	// network work.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var b evs.Batch
		b, err = w.r.cfg.Store.PutResults(ctx, w.b.AccountID, w.b.ID, rs, w.r.cfg.Now())
		if err == nil {
			if b.State.Final() && b.State != evs.StateCompleted {
				w.stop() // cancelled or failed: stop new work promptly
			}
			return true
		}
		if evs.ErrorCode(err) != evs.CodeUnavailable {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
	}
	logErr(w.r.cfg.Logger, "could not write results; they stay pending and are redone at the next start", w.b, err)
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	return false
}

func (w *writer) close() error {
	close(w.closed)
	<-w.done
	w.flush() // results added after the loop stopped
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
