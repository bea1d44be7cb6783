// Package sqlitestore is the embedded, durable store.Store of `evs serve`:
// one SQLite database file in a data directory, written through the pure-Go
// driver so the binary needs no C toolchain.
//
// Several processes may open the same directory at once (`evs keys create`
// while `evs serve` runs): the database runs in WAL mode, every write is an
// immediate transaction, and a busy database is waited for rather than
// failed. Every acknowledged write survives kill -9; every acknowledged write
// except an Idempotency-Key record (a claim, a release, a local-mode reply)
// is also synced to disk (synchronous=FULL) before it is acknowledged, so it
// survives power loss. (What a power loss costs those records: see
// ClaimIdempotency and PutIdempotency.)
//
// Only one of them serves the API: `evs serve` opens the directory with
// OpenServing, which holds an exclusive flock on serve.lock until Close or
// the process's death, and a second server on the directory is refused.
// Being the only server lets it keep Idempotency-Key claims in memory
// (idempotency.NewLocal): an idempotent call then costs one indexed read
// (LookupIdempotency) and one insert of the reply, committed in a group
// with the writes beside it (PutIdempotency), instead of a claim and a
// completion. A reply is committed before it is sent, so after kill -9 it
// is replayed, never run again; a call cut off mid-way wrote nothing, and
// its retry runs at once. Being the only writer of
// batches also lets it keep the views of batches in memory (viewcache.go):
// a poll reads no database unless the batch was written since the last one.
//
// Inside one process, writes go through a single writer connection and are
// committed in groups: concurrent writes share one transaction and one sync,
// each in its own savepoint, and each caller returns only once the group is
// committed. Reads use a pool of query-only connections beside the writer
// (WAL lets them run while it writes). Statements are prepared once per
// connection, not parsed per call.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// FileName is the database file inside the data directory.
const FileName = "evs.db"

// busyTimeout is how long a write waits for another process's write
// transaction before giving up with CodeUnavailable.
const busyTimeout = 5 * time.Second

// Store is the SQLite store.Store. It is safe for concurrent use.
type Store struct {
	// db is the one writer connection: this process's writes queue in Go
	// (the committer) instead of spinning in SQLite's busy handler; other
	// processes are still waited for through busy_timeout.
	db *sql.DB
	// rdb is the pool of query-only reader connections.
	rdb *sql.DB
	now func() time.Time

	wstmts, rstmts stmtCache
	c              *committer
	// lock is the open serve lock file (OpenServing), nil without one.
	lock *os.File
	// views is the cache of batch views; nil unless this process
	// is the only writer of batches (OpenServing).
	views *viewCache
	// stateHook, when set (OnStateChange), hears of each batch state a
	// committed write made.
	stateHook func(b evs.Batch, from evs.State)
	// keys tells lookups which scopes surely have no idempotency record;
	// nil unless this process is the directory's only server.
	keys *keyFilter
	// quota mirrors the address quota's counters; nil unless this process
	// is the directory's only server.
	quota *quotaMirror
	// outcomes tells history reads which addresses and domains surely
	// have none (outcomeScope); nil unless this process is the
	// directory's only server.
	outcomes *keyFilter
	// memo keeps the history last read; nil unless this process is the
	// directory's only server.
	memo *historyMemo
	// exportMu makes reading and writing an export's record one step.
	exportMu sync.Mutex
	// dir is the data directory; keysGen counts this store's writes to
	// keys and accounts (KeysVersion).
	dir     string
	keysGen atomic.Int64
	// keysWatch is KeysChangedName, open once KeysVersion was asked.
	keysWatch atomic.Pointer[os.File]
	keysMu    sync.Mutex
	// closed is set by Close: a lookup the key filter answers must still
	// fail on a closed store, as one that reads does.
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	// warnings are what Open found unsafe but could go on with.
	warnings []string
}

// Warnings returns what Open found unsafe about the data directory but
// could go on with (a directory other users can read), one sentence each,
// for the caller to log at start.
func (s *Store) Warnings() []string { return s.warnings }

var _ store.Store = (*Store)(nil)

// LockName is the file in the data directory that OpenServing locks.
const LockName = "serve.lock"

// ErrInUse is what OpenServing's error matches (errors.Is) when another
// process serves the data directory.
var ErrInUse = errors.New("the data directory is in use by another evs serve")

// inUseError names the directory another process serves.
type inUseError struct{ dir string }

func (e inUseError) Error() string {
	return fmt.Sprintf("data directory %s is in use by another evs serve", e.dir)
}

func (e inUseError) Unwrap() error { return ErrInUse }

// Open opens (creating them if needed) dir and the database dir/evs.db,
// migrates its schema to the current version (keeping a copy of an older
// database beside it, PreMigrationName) and returns the store. now is
// the store's clock, used for batch expiry. Any number of processes may
// hold a store of the same directory open this way.
func Open(ctx context.Context, dir string, now func() time.Time) (*Store, error) {
	return open(ctx, dir, now, busyTimeout, false)
}

// OpenServing is Open for the one serving process of dir: it also takes an
// exclusive lock on dir/serve.lock, held until Close (or the process's
// death), and fails with ErrInUse at once if another process holds it. The
// lock makes the store Exclusive, which lets the server keep Idempotency-Key
// claims in memory (idempotency.NewLocal) and write once per call instead of
// twice. Processes using Open (`evs keys create` and the like) work beside
// the lock's holder, since they do not run idempotent calls; they take the
// lock only to migrate an older database, and refuse to while a server
// holds it (prepareMigration).
func OpenServing(ctx context.Context, dir string, now func() time.Time) (*Store, error) {
	return open(ctx, dir, now, busyTimeout, true)
}

// Exclusive tells whether s was opened with OpenServing and holds the serve
// lock, so no other process serves its directory while s is open.
func (s *Store) Exclusive() bool { return s.lock != nil }

// open is Open with the time a write waits for another process's lock, and
// with the serve lock when serving.
func open(ctx context.Context, dir string, now func() time.Time, busy time.Duration, serving bool) (_ *Store, err error) {
	if now == nil {
		return nil, errors.New("sqlitestore: Open needs a clock")
	}
	if strings.ContainsRune(dir, '?') {
		// The driver splits its DSN at the first '?'.
		return nil, fmt.Errorf("sqlitestore: data directory %q contains '?'", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sqlitestore: create data directory: %w", err)
	}
	if err := checkWritable(dir); err != nil {
		return nil, err
	}
	warnings, err := privateFiles(dir)
	if err != nil {
		return nil, err
	}
	var lock *os.File
	if serving {
		// Before the database is touched: a second server must not even
		// migrate under the first one's feet.
		if lock, err = lockDir(dir); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil && lock != nil {
				lock.Close()
			}
		}()
	}
	// Before SQLite touches the files: opening would start afresh from
	// evs.db alone.
	by := openCommand
	if lock != nil {
		by = openServer
	}
	if err := checkWAL(dir, by); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	q := url.Values{"_txlock": {"immediate"}, "_pragma": {fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()),
		"journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(ON)", fmt.Sprintf("cache_size(%d)", writerCacheKiB), "temp_store(MEMORY)"}}
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open: %w", err)
	}
	// One writer connection, kept open: its prepared statements and page
	// cache live as long as the store.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)

	// Readers never write (query_only), so they need neither the write
	// lock nor synchronous; the WAL mode is the database file's, set above.
	rq := url.Values{"_pragma": {fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()),
		"query_only(1)", fmt.Sprintf("cache_size(%d)", readerCacheKiB), "temp_store(MEMORY)"}}
	rdb, err := sql.Open("sqlite", path+"?"+rq.Encode())
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: open readers: %w", err)
	}
	// Idle readers stay open (the default of two idle connections would
	// close and reopen them, schema parse and all, under load).
	n := readers()
	rdb.SetMaxOpenConns(n)
	rdb.SetMaxIdleConns(n)
	rdb.SetConnMaxIdleTime(0)

	s := &Store{db: db, rdb: rdb, now: now, warnings: warnings, dir: dir}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.wstmts.db, s.rstmts.db = db, rdb
	s.c = startCommitter(db, &s.wstmts)
	// The savepoint statements first: migrate may share a group.
	if err := s.wstmts.prepare(ctx, []string{qSavepoint, qRollbackTo, qReleaseSavepoint}); err != nil {
		return nil, err
	}
	if err := quickCheck(ctx, rdb, path); err != nil {
		return nil, err
	}
	release, err := s.prepareMigration(ctx, serving)
	if err != nil {
		return nil, err
	}
	err = s.migrate(ctx)
	release()
	if err != nil {
		return nil, err
	}
	if err := errors.Join(s.wstmts.prepare(ctx, writerQueries), s.rstmts.prepare(ctx, readerQueries)); err != nil {
		return nil, err
	}
	if lock != nil {
		if err := markRunning(dir); err != nil {
			return nil, err
		}
		s.lock = lock
		// Only the serving process writes batches and deliveries, and this
		// store is it: batch views can be kept in memory.
		s.views = newViewCache()
		s.quota = &quotaMirror{m: make(map[quotaKey]mirrored)}
		if s.keys, err = newKeyFilter(ctx, s.rdb, `SELECT scope FROM idempotency`); err != nil {
			return nil, err
		}
		if s.outcomes, err = newKeyFilter(ctx, s.rdb, qOutcomeScopes); err != nil {
			return nil, err
		}
		s.memo = newHistoryMemo()
	}
	return s, nil
}

// checkWritable fails when the store could not write in dir: a read-only
// directory or database file otherwise surfaced as "unavailable; retry" on
// the first write, which no retry can fix.
func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".evs-write-check-*")
	if err != nil {
		return fmt.Errorf("sqlitestore: the data directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("sqlitestore: the data directory %s is not writable: %w", dir, err)
	}
	for _, n := range []string{FileName, FileName + "-wal", FileName + "-shm"} {
		f, err := os.OpenFile(filepath.Join(dir, n), os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("sqlitestore: %s is not writable: %w", filepath.Join(dir, n), err)
		}
		f.Close()
	}
	return nil
}

// privateFiles makes the database files readable by their owner only:
// they hold webhook secrets and every tenant's addresses. SQLite creates
// the database with the process's umask (0644 under the usual 022) and
// gives its -wal and -shm files the database file's mode, so the database
// is created here first, 0600, and an existing one left group- or
// world-accessible by an older build is tightened. A data directory others
// can read or enter is only reported: it may be shared on purpose, and the
// files in it are private either way.
func privateFiles(dir string) (warnings []string, err error) {
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		f.Close()
	case !errors.Is(err, os.ErrExist):
		return nil, fmt.Errorf("sqlitestore: create %s: %w", path, err)
	}
	for _, n := range []string{FileName, FileName + "-wal", FileName + "-shm"} {
		p := filepath.Join(dir, n)
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: %w", err)
		}
		if fi.Mode().Perm()&0o077 == 0 {
			continue
		}
		if err := os.Chmod(p, fi.Mode().Perm()&^0o077); err != nil {
			return nil, fmt.Errorf("sqlitestore: %s is readable by other users (mode %04o) and could not be made private: %w", p, fi.Mode().Perm(), err)
		}
		warnings = append(warnings, fmt.Sprintf("%s was readable by other users (mode %04o); it is now %04o", p, fi.Mode().Perm(), fi.Mode().Perm()&^0o077))
	}
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		warnings = append(warnings, fmt.Sprintf("the data directory %s is accessible to other users (mode %04o): its files are private, but run chmod 700 %s unless it is shared on purpose",
			dir, fi.Mode().Perm(), dir))
	}
	return warnings, nil
}

// wstmt returns query as a statement of tx: the one prepared at Open when
// there is one, else prepared now for this transaction.
func (s *Store) wstmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	if st, ok := s.wstmts.m[query]; ok {
		return tx.StmtContext(ctx, st), nil
	}
	return tx.PrepareContext(ctx, query)
}

// exec runs the writer query q in tx (wstmt).
func (s *Store) exec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	st, err := s.wstmt(ctx, tx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// row reads the one row of the writer query q in tx (wstmt); a statement
// that could not be prepared fails its Scan.
func (s *Store) row(ctx context.Context, tx *sql.Tx, q string, args ...any) scanner {
	st, err := s.wstmt(ctx, tx, q)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// rstmt returns the reader statement of query, prepared at Open.
func (s *Store) rstmt(query string) *sql.Stmt {
	st, ok := s.rstmts.m[query]
	if !ok {
		// A query missing from readerQueries is a bug, found by any test
		// that runs it.
		panic("sqlitestore: reader query not prepared: " + query)
	}
	return st
}

// Page caches, in KiB (SQLite's negative cache_size). The writer's is the
// larger: it holds the b-tree pages a batch's inserts touch. Readers share
// the operating system's file cache, so theirs stay small, which keeps the
// resident memory of an idle server low.
const (
	writerCacheKiB = -8000
	readerCacheKiB = -2000
)

// readers is the size of the reader pool: enough for every core to read
// while others wait on the network, few enough to keep memory low.
func readers() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// Close waits for queued writes, then closes the database, then releases
// the serve lock if s holds it: the next server starts only once this one
// has stopped writing.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.quota != nil {
			s.quota.close()
		}
		s.c.stop()
		s.wstmts.close()
		s.rstmts.close()
		var err error
		if s.lock != nil {
			// No write of this server is to come. The marker goes first,
			// while the write-ahead log is still there: closing the
			// database copies the log into evs.db and deletes it, and a
			// kill between that and removing the marker would leave the
			// marker without its log, a false alarm at the next start.
			// Killed here instead, the log is there for the next start.
			err = removeSynced(filepath.Join(s.dir, RunningName))
		}
		err = errors.Join(err, s.closeKeysFile(), s.db.Close(), s.rdb.Close())
		if s.lock != nil {
			err = errors.Join(err, s.lock.Close())
		}
		if err != nil {
			s.closeErr = fmt.Errorf("sqlitestore: close: %w", err)
		}
	})
	return s.closeErr
}

// write runs fn in an immediate transaction, shared with the writes queued
// at the same time, and returns once that transaction is committed and
// synced. fn gets a context that is not cancelled with ctx: a statement
// interrupted inside a shared transaction would roll back the others' work.
// A write whose ctx ends before it starts is not run.
func (s *Store) write(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.c.do(ctx, &op{fn: fn, sync: true})
}

// writeOne is write for fn that writes with at most one statement (reads
// aside): it shares the group's transaction without a savepoint, since a
// failed statement undoes itself.
//
// Without sync, the write is for a record whose loss on power failure is
// harmless: the transaction is written to the log (so it survives kill -9
// and every process sees it at once) but not synced unless a write in the
// same group needs it; the next synced commit syncs it too.
func (s *Store) writeOne(ctx context.Context, sync bool, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.c.do(ctx, &op{fn: fn, sync: sync, oneStatement: true})
}

// touched tells the view cache that a write to the batch has returned,
// committed or not.
// OnStateChange sets fn to be called after each committed write that gives
// a batch a new state, with the batch as written and the state it left
// ("" for a batch just created): queued, running, completed, cancelled,
// failed; and after each write of results that leaves its state as it was
// (from == b.State), with the new counters: its progress. This store is
// the one place every change passes through, whoever makes it (the API,
// the batch worker, the deadline), so an operator's log hangs here. fn
// runs after the write, outside it; it must not call back into the
// store's writes. Set it before the store is used.
func (s *Store) OnStateChange(fn func(b evs.Batch, from evs.State)) { s.stateHook = fn }

// stateChanged tells the hook of a state the batch did not have before.
func (s *Store) stateChanged(b evs.Batch, from evs.State) {
	if b.State != from {
		s.batchWritten(b, from)
	}
}

// batchWritten tells the hook of a batch a write changed.
func (s *Store) batchWritten(b evs.Batch, from evs.State) {
	if s.stateHook != nil && b.ID != "" {
		s.stateHook(b, from)
	}
}

func (s *Store) touched(accountID, id string) {
	if s.views != nil {
		s.views.wrote(accountID, id)
	}
}

// dbErr classifies a database error: a database that is busy or cannot be
// read or written is unavailable (the caller may retry); anything else is a
// fault, wrapped with what was being done.
func dbErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*evs.Error](err); ok {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || unavailable(err) {
		return store.Unavailable(fmt.Errorf("sqlitestore: %s: %w", op, err))
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}

// rowErr is the error of a one-row read: missing() when there was no row,
// else dbErr(op, err), nil when the row was read.
func rowErr(err error, op string, missing func() error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return missing()
	}
	return dbErr(op, err)
}

// eachRow calls scan on every row of a query's rows (err is the query's
// own), then closes them. A failed query, read or close is dbErr(op);
// scan's errors are returned as they are.
func eachRow(rows *sql.Rows, err error, op string, scan func(*sql.Rows) error) error {
	if err != nil {
		return dbErr(op, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return dbErr(op, errors.Join(rows.Err(), rows.Close()))
}

// changed is how many rows a statement's result (err is the statement's
// own) changed.
func changed(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func unavailable(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	// Not SQLITE_READONLY: a database that became read-only needs an
	// operator, so it is an internal error, not "retry".
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
		sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOMEM:
		return true
	}
	return false
}

// constraint tells whether err is a violated constraint of kind ext (an
// extended SQLITE_CONSTRAINT_* code).
func constraint(err error, ext int) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == ext
}

// Times are stored as UTC unix milliseconds; NULL is the zero time.

func millis(t time.Time) int64 { return t.UnixMilli() }

func nullMillis(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func fromNullMillis(ms sql.NullInt64) time.Time {
	if !ms.Valid {
		return time.Time{}
	}
	return fromMillis(ms.Int64)
}
