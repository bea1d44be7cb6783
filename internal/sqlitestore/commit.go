package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
)

// maxGroup caps the writes one transaction carries, so one group's commit
// never waits on an unbounded amount of work queued behind it.
const maxGroup = 256

// errClosed is the answer to a write queued after Close.
var errClosed = errors.New("sqlitestore: the store is closed")

// op is one queued write.
type op struct {
	ctx  context.Context
	fn   func(ctx context.Context, tx *sql.Tx) error
	sync bool
	// oneStatement says fn writes with at most one statement, so when it
	// fails there is nothing to undo (SQLite undoes a failed statement
	// itself) and it needs no savepoint of its own.
	oneStatement bool
	// early, if set and true once fn has run without error, says the
	// caller may be answered as soon as the group is committed, ahead of
	// the syncs in flight: a write that needs no sync and whose answer
	// tells nothing of other writes (a new idempotency claim).
	early func() bool
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
// groups: one transaction and, at most, one sync per group. This is what
// makes an idempotent call cheap under concurrency: the claims and
// completions of all calls in flight share a commit instead of queueing for
// one each.
//
// Syncing is pipelined: the writer connection commits without syncing
// (synchronous=NORMAL: the commit is in the WAL, safe from kill -9), and a
// second goroutine syncs the WAL file for the groups that need it while the
// committer already runs the next group. Callers are answered group by
// group in commit order, each only after every sync-needing group up to
// and including its own is synced: no caller, synced or not, can hear of a
// write (say, read a completed idempotency record) before that write is on
// disk. One sync covers every group committed before it.
type committer struct {
	db    *sql.DB
	stmts *stmtCache // for the savepoint statements
	wal   string     // the WAL file's path
	queue chan *op
	done  chan committed // committed groups, in order, to sync and answer
	quit  chan struct{}
	wg    sync.WaitGroup
	mu    sync.RWMutex // held for reading while enqueueing; Close takes it to stop intake
	shut  bool
}

// committed is a committed group waiting for its answers.
type committed struct {
	ops  []*op
	errs []error
	sync bool // some write of the group needs a sync
}

func startCommitter(db *sql.DB, stmts *stmtCache, wal string) *committer {
	c := &committer{db: db, stmts: stmts, wal: wal, queue: make(chan *op, maxGroup),
		done: make(chan committed, maxGroup), quit: make(chan struct{})}
	c.wg.Add(2)
	go c.loop()
	go c.syncLoop()
	return c
}

// do queues fn and waits for its group's commit.
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

// stop finishes the queued writes and stops the committer.
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
	defer close(c.done)
	group := make([]*op, 0, maxGroup)
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
		// Let the goroutines that are ready to write queue first: under
		// load, a group grows from a couple of writes to dozens, and the
		// commit's fixed cost (its WAL writes) is shared by all of them.
		// Idle, this costs a scheduler pass.
		runtime.Gosched()
		group = append(group[:0], first)
	fill:
		for len(group) < maxGroup {
			select {
			case o := <-c.queue:
				group = append(group, o)
			default:
				break fill
			}
		}
		c.commit(group)
		clear(group)
	}
}

// commit runs a group in one transaction. Each write runs in its own
// savepoint, so one that fails is undone alone and the others commit; each
// caller is answered only after the commit.
func (c *committer) commit(group []*op) {
	ops := make([]*op, 0, len(group)) // kept past the loop's reuse of group
	for _, o := range group {
		if o.state.CompareAndSwap(opQueued, opTaken) {
			ops = append(ops, o)
		}
	}
	if len(ops) == 0 {
		return
	}
	ctx := context.Background()
	wantSync := false
	for _, o := range ops {
		wantSync = wantSync || o.sync
	}
	errs := make([]error, len(ops))
	fail := func(err error) {
		for _, o := range ops {
			o.done <- err
		}
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
			var own ownError
			if errors.As(err, &own) {
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
	// Early answers first; the rest wait for the syncs before them.
	rest, restErrs := ops[:0], errs[:0]
	for i, o := range ops {
		if errs[i] == nil && !o.sync && o.early != nil && o.early() {
			o.done <- nil
			continue
		}
		rest, restErrs = append(rest, o), append(restErrs, errs[i])
	}
	if len(rest) > 0 {
		c.done <- committed{ops: rest, errs: restErrs, sync: wantSync}
	}
}

// syncLoop answers committed groups in order, syncing the WAL first when
// any of the groups at hand needs it.
func (c *committer) syncLoop() {
	defer c.wg.Done()
	var (
		f     *os.File
		batch []committed
		dirty bool // the last sync failed
	)
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for g := range c.done {
		batch = append(batch[:0], g)
	more:
		for {
			select {
			case g, ok := <-c.done:
				if !ok {
					break more
				}
				batch = append(batch, g)
			default:
				break more
			}
		}
		need := dirty
		for _, g := range batch {
			need = need || g.sync
		}
		var serr error
		if need {
			f, serr = c.syncWAL(f)
			// After a failed sync nothing written since the last good
			// one is known to be on disk: every answer waits for a sync
			// that works.
			dirty = serr != nil
		}
		for _, g := range batch {
			for i, o := range g.ops {
				err := g.errs[i]
				if err == nil && serr != nil {
					// Committed, but not known to be on disk: the caller
					// must not act as if it were.
					err = dbErr("sync", serr)
				}
				o.done <- err
			}
		}
		clear(batch)
	}
}

// syncWAL syncs the WAL file, opening it on first use. Syncing any
// descriptor of the file writes out what the writer connection wrote to
// it; the directory is synced once too, for the file's own entry.
func (c *committer) syncWAL(f *os.File) (*os.File, error) {
	if f == nil {
		var err error
		if f, err = os.OpenFile(c.wal, os.O_RDWR, 0); err != nil {
			return nil, err
		}
		if d, err := os.Open(filepath.Dir(c.wal)); err == nil {
			_ = d.Sync() // best effort: not every file system syncs directories
			d.Close()
		}
	}
	return f, f.Sync()
}

// ownError marks an error of one write, undone by its savepoint, as
// opposed to a failure of the shared transaction.
type ownError struct{ err error }

func (e ownError) Error() string { return e.err.Error() }
func (e ownError) Unwrap() error { return e.err }

// savepoint runs o inside a savepoint of tx. o's own failure is rolled back
// to the savepoint and returned as an ownError carrying it.
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
	if err := exec(qReleaseSavepoint); err != nil {
		return dbErr("release savepoint", err)
	}
	return nil
}

// The savepoint statements, prepared at Open like the others.
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

// stmtCache holds the statements prepared once on a pool when the store
// opens; database/sql keeps each prepared on every connection it has run
// on. It is read-only after Open, so it needs no lock. Statements are
// prepared up front, not on first use, because preparing on the pool while
// a transaction holds the writer connection would wait for it forever.
type stmtCache struct {
	db *sql.DB
	m  map[string]*sql.Stmt
}

// prepare prepares queries.
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
