package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// maxGroup caps the writes one transaction carries, so one group's commit
// never waits on an unbounded amount of work queued behind it.
const maxGroup = 256

// lingerFor is how long a group waits for more writes after a group of
// more than one: long beside a commit's work, short beside a call's.
// patientFor is how long while every write in it is patient.
const (
	lingerFor  = 500 * time.Microsecond
	patientFor = 1 * time.Millisecond
)

// errClosed is the answer to a write queued after Close.
var errClosed = errors.New("sqlitestore: the store is closed")

// op is one queued write.
type op struct {
	ctx  context.Context
	fn   func(ctx context.Context, tx *sql.Tx) error
	sync bool
	// oneStatement: fn writes with at most one statement, which SQLite
	// undoes itself when it fails, so it needs no savepoint.
	oneStatement bool
	// patient: one of many alike that calls make at once, each small
	// beside a commit (a keyed call's record, the quota mirror's counts),
	// so its group waits longer for company; a batch's writes, which
	// follow one another, would only wait.
	patient bool
	// state moves from queued to taken (by the committer) or abandoned (by
	// a caller whose ctx ended first), never both.
	state atomic.Int32
	done  chan error
}

const (
	opQueued int32 = iota
	opTaken
	opAbandoned
)

// committer owns the writer connection and commits queued writes in
// groups, one transaction and at most one sync each: the writes of all
// calls in flight share a commit instead of queueing for one each.
type committer struct {
	db     *sql.DB
	stmts  *stmtCache // for the savepoint statements
	queue  chan *op
	quit   chan struct{}
	wg     sync.WaitGroup
	mu     sync.RWMutex // held for reading while enqueueing; Close takes it to stop intake
	shut   bool
	synced bool          // the writer connection's synchronous setting
	wrote  chan struct{} // a commit the checkpointer has not looked at
}

// startCommitter commits on db, and checkpoints on readers (checkpoints).
func startCommitter(db, readers *sql.DB, stmts *stmtCache) *committer {
	c := &committer{db: db, stmts: stmts, queue: make(chan *op, maxGroup), quit: make(chan struct{}), synced: true,
		wrote: make(chan struct{}, 1)}
	c.wg.Add(2)
	go c.loop()
	go c.checkpoints(readers)
	return c
}

// walAutocheckpoint is the WAL's length, in pages, from which the writer
// checkpoints after each commit (SQLite's default: 1000). Only a wholly
// copied WAL starts over, which under steady writes only the writer's own
// checkpoint achieves, with a stall (its syncs): one every 80 MiB of WAL,
// not every 4 MiB.
const walAutocheckpoint = 20000

// The checkpointer looks at most every checkpointEvery after commits, and
// copies the WAL once checkpointPages of it are not yet in the database
// file (SQLite's own threshold): a WAL copied sooner would start over
// sooner, into space it already holds on disk, and a full disk would go
// unnoticed by the writes that fit there (TestDiskFullHeals).
const (
	checkpointEvery = 100 * time.Millisecond
	checkpointPages = 1000
)

// checkpoints copies the WAL into the database file on a reader
// connection, beside the committer: SQLite's own checkpoint runs in the
// committing connection, and its syncs held up every queued write (a third
// of the keyed calls' rate). A reader's synchronous is the default FULL, so
// a checkpoint syncs as the writer's would.
func (c *committer) checkpoints(readers *sql.DB) {
	defer c.wg.Done()
	for {
		select {
		case <-c.wrote:
		case <-c.quit:
			return
		}
		// A failure is retried after the next commit, and the writer's
		// own checkpoint bounds the WAL meanwhile.
		var busy, pages, copied int
		if readers.QueryRow("PRAGMA wal_checkpoint(NOOP)").Scan(&busy, &pages, &copied) == nil && pages-copied >= checkpointPages {
			_, _ = readers.Exec("PRAGMA wal_checkpoint(PASSIVE)")
		}
		select {
		case <-time.After(checkpointEvery):
		case <-c.quit:
			return
		}
	}
}

func (c *committer) do(ctx context.Context, o *op) error {
	if err := ctx.Err(); err != nil {
		return dbErr("begin", err)
	}
	o.ctx, o.done = ctx, make(chan error, 1)
	c.mu.RLock()
	if c.shut {
		c.mu.RUnlock()
		return errClosed
	}
	select {
	case c.queue <- o:
	case <-ctx.Done():
		c.mu.RUnlock()
		return dbErr("begin", ctx.Err())
	}
	c.mu.RUnlock()
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opAbandoned) {
			return dbErr("begin", ctx.Err())
		}
		// Already running: its outcome is the caller's to know.
		return <-o.done
	}
}

func (c *committer) stop() {
	c.mu.Lock()
	if !c.shut {
		c.shut = true
		close(c.quit)
	}
	c.mu.Unlock()
	c.wg.Wait()
}

func (c *committer) loop() {
	defer c.wg.Done()
	group := make([]*op, 0, maxGroup)
	last := 0 // the size of the group committed last
	for {
		var first *op
		select {
		case first = <-c.queue:
		case <-c.quit:
			// Intake is closed; run what is still queued.
			for {
				select {
				case o := <-c.queue:
					c.commit(append(group[:0], o))
				default:
					return
				}
			}
		}
		group = append(group[:0], first)
		// A group that had company lingers for more: the commit, not the
		// writes, is most of a small group's cost (a unique
		// Idempotency-Key per call: groups of about 4 without, 17 with
		// 0.5 ms, 20 with 2 ms).
		var linger *time.Timer
		start, patient, wait := time.Now(), first.patient, lingerFor
		if patient {
			wait = patientFor
		}
		if last > 1 {
			linger = time.NewTimer(wait)
		}
	fill:
		for len(group) < maxGroup {
			var o *op
			select {
			case o = <-c.queue:
			default:
				if linger == nil {
					break fill
				}
				select {
				case o = <-c.queue:
				case <-linger.C:
					break fill
				}
			}
			group = append(group, o)
			if patient && !o.patient && linger != nil {
				// An impatient write joined: wait no longer than for it.
				patient = false
				left := time.Until(start.Add(lingerFor))
				if left <= 0 {
					break fill
				}
				linger.Reset(left)
			}
		}
		if linger != nil {
			linger.Stop()
		}
		last = len(group)
		c.commit(group)
		clear(group)
		select {
		case c.wrote <- struct{}{}:
		default:
		}
	}
}

// commit runs a group in one transaction. Each write runs in its own
// savepoint, so one that fails is undone alone and the others commit; each
// caller is answered only after the commit.
func (c *committer) commit(group []*op) {
	ops := slices.DeleteFunc(group, func(o *op) bool { return !o.state.CompareAndSwap(opQueued, opTaken) })
	if len(ops) == 0 {
		return
	}
	ctx := context.Background()
	wantSync := slices.ContainsFunc(ops, func(o *op) bool { return o.sync })
	errs := make([]error, len(ops))
	fail := func(err error) {
		for _, o := range ops {
			o.done <- err
		}
	}
	if wantSync != c.synced {
		// Per connection and outside a transaction; kept until changed.
		mode := "NORMAL"
		if wantSync {
			mode = "FULL"
		}
		if _, err := c.db.ExecContext(ctx, "PRAGMA synchronous = "+mode); err != nil {
			fail(dbErr("set synchronous", err))
			return
		}
		c.synced = wantSync
	}
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		fail(dbErr("begin", err))
		return
	}
	if len(ops) == 1 {
		errs[0] = run(ops[0], tx)
		if errs[0] != nil {
			tx.Rollback()
			ops[0].done <- errs[0]
			return
		}
	} else {
		for i, o := range ops {
			var err error
			if o.oneStatement {
				err = run(o, tx)
				if err != nil {
					err = ownError{err}
				}
			} else {
				err = c.savepoint(ctx, tx, o)
			}
			if own, ok := errors.AsType[ownError](err); ok {
				errs[i] = own.err
				continue
			}
			if err != nil {
				// The transaction itself is broken: nothing in it stands.
				tx.Rollback()
				fail(err)
				return
			}
		}
	}
	if err := tx.Commit(); err != nil {
		fail(dbErr("commit", err))
		return
	}
	for i, o := range ops {
		o.done <- errs[i]
	}
}

// ownError marks an error of one write, undone by its savepoint, as
// opposed to a failure of the shared transaction.
type ownError struct{ err error }

func (e ownError) Error() string { return e.err.Error() }
func (e ownError) Unwrap() error { return e.err }

// savepoint runs o inside a savepoint of tx; o's own failure is rolled
// back and returned as an ownError.
func (c *committer) savepoint(ctx context.Context, tx *sql.Tx, o *op) error {
	exec := func(q string) error {
		_, err := tx.StmtContext(ctx, c.stmts.m[q]).ExecContext(ctx)
		return err
	}
	if err := exec(qSavepoint); err != nil {
		return dbErr("savepoint", err)
	}
	if err := run(o, tx); err != nil {
		if rerr := exec(qRollbackTo); rerr != nil {
			return dbErr("rollback to savepoint", errors.Join(err, rerr))
		}
		if rerr := exec(qReleaseSavepoint); rerr != nil {
			return dbErr("release savepoint", rerr)
		}
		return ownError{err}
	}
	return dbErr("release savepoint", exec(qReleaseSavepoint))
}

const (
	qSavepoint        = `SAVEPOINT w`
	qRollbackTo       = `ROLLBACK TO w`
	qReleaseSavepoint = `RELEASE w`
)

// run calls o.fn, turning a panic into an error: the committer serves every
// caller and must not die with one of them.
func run(o *op, tx *sql.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sqlitestore: write panicked: %v", p)
		}
	}()
	return o.fn(context.WithoutCancel(o.ctx), tx)
}

// stmtCache holds the statements prepared on a pool when the store opens,
// read-only after. Not on first use: preparing on the pool while a
// transaction holds the writer connection would wait for it forever.
type stmtCache struct {
	db *sql.DB
	m  map[string]*sql.Stmt
}

func (c *stmtCache) prepare(ctx context.Context, queries []string) error {
	if c.m == nil {
		c.m = make(map[string]*sql.Stmt, len(queries))
	}
	for _, q := range queries {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			return dbErr("prepare", err)
		}
		c.m[q] = st
	}
	return nil
}

func (c *stmtCache) close() {
	// The map is kept: a call after Close finds its statement closed and
	// gets "statement is closed" as an error, not a panic.
	for _, st := range c.m {
		st.Close()
	}
}
