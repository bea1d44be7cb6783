// Package sqlitestore is the embedded, durable store.Store of `evs serve`:
// one SQLite database file in a data directory, through the pure-Go driver
// so the binary needs no C toolchain.
//
// Several processes may open one directory at once (`evs keys create` while
// `evs serve` runs): WAL mode, immediate transactions, and a busy database
// waited for. Every acknowledged write survives kill -9, and all but
// Idempotency-Key records are synced (synchronous=FULL) so they survive
// power loss too (see ClaimIdempotency and PutIdempotency).
//
// Only one process serves the API (OpenServing's flock on serve.lock). Being
// the only server lets it keep Idempotency-Key claims (idempotency.NewLocal),
// batch views (viewcache.go) and filters of what is stored in memory, and
// commit a reply with the writes beside it before it is sent.
//
// Inside one process, writes go through one writer connection, committed in
// groups (one transaction and one sync, a savepoint each); reads use a pool
// of query-only connections. Statements are prepared once per connection.
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
	// (the committer) instead of spinning in SQLite's busy handler.
	db  *sql.DB
	rdb *sql.DB // query-only readers
	now func() time.Time

	wstmts, rstmts stmtCache
	c              *committer
	lock           *os.File // the serve lock (OpenServing), else nil

	// Only the directory's one server (OpenServing) has these; nil else.
	views    *viewCache
	keys     *keyFilter // scopes that surely have no idempotency record
	quota    *quotaMirror
	outcomes *keyFilter // addresses and domains that surely have no history
	memo     *historyMemo

	stateHook func(b evs.Batch, from evs.State) // OnStateChange
	exportMu  sync.Mutex                        // reading and writing an export's record is one step
	dir       string
	keysGen   atomic.Int64            // this store's writes to keys and accounts (KeysVersion)
	keysWatch atomic.Pointer[os.File] // KeysChangedName, once KeysVersion was asked
	keysMu    sync.Mutex
	// closed: a lookup the key filter answers must still fail on a
	// closed store, as one that reads does.
	closed   atomic.Bool
	close    func() error // Close, once
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

// kindError is an error with a text of its own that matches (errors.Is)
// its kind, ErrInUse or ErrDamaged.
type kindError struct {
	msg  string
	kind error
}

func (e kindError) Error() string { return e.msg }
func (e kindError) Unwrap() error { return e.kind }

// Open opens (creating them if needed) dir and the database dir/evs.db,
// migrates its schema to the current version (keeping a copy of an older
// database beside it, PreMigrationName) and returns the store. now is
// the store's clock, used for batch expiry. Any number of processes may
// hold a store of the same directory open this way.
func Open(ctx context.Context, dir string, now func() time.Time) (*Store, error) {
	return open(ctx, dir, now, busyTimeout, false)
}

// OpenServing is Open for the one serving process of dir: it also holds an
// exclusive lock on dir/serve.lock until Close (or its death), and fails
// with ErrInUse if another process holds it. Processes using Open work
// beside the holder, since they run no idempotent calls; they take the
// lock only to migrate an older database (prepareMigration).
func OpenServing(ctx context.Context, dir string, now func() time.Time) (*Store, error) {
	return open(ctx, dir, now, busyTimeout, true)
}

// Exclusive tells whether s was opened with OpenServing and holds the serve
// lock, so no other process serves its directory while s is open.
func (s *Store) Exclusive() bool { return s.lock != nil }

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
	by := openCommand
	if serving {
		by = openServer
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
	if err := checkWAL(dir, by); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	q := url.Values{"_txlock": {"immediate"}, "_pragma": {fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()),
		"journal_mode(WAL)", fmt.Sprintf("wal_autocheckpoint(%d)", walAutocheckpoint), "synchronous(FULL)", "foreign_keys(ON)", fmt.Sprintf("cache_size(%d)", writerCacheKiB), "temp_store(MEMORY)"}}
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open: %w", err)
	}
	// Kept open: its prepared statements and page cache live as long as
	// the store.
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
	s.close = sync.OnceValue(s.closeAll)
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.wstmts.db, s.rstmts.db = db, rdb
	s.c = startCommitter(db, rdb, &s.wstmts)
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
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
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

// privateFiles makes the database files (webhook secrets, every tenant's
// addresses) readable by their owner only. SQLite creates the database
// under the umask and gives -wal and -shm its mode, so the database is
// created here first, 0600, and an older, looser one is tightened. A
// directory others can read is only reported: it may be shared on purpose.
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

// Page caches, in KiB (SQLite's negative cache_size). The writer's holds
// the b-tree pages a batch's inserts touch; readers share the OS's file
// cache, so theirs stay small to keep an idle server's memory low.
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
func (s *Store) Close() error { return s.close() }

func (s *Store) closeAll() error {
	s.closed.Store(true)
	if s.quota != nil {
		s.quota.close()
	}
	s.c.stop()
	s.wstmts.close()
	s.rstmts.close()
	var err error
	if s.lock != nil {
		// The marker goes while the WAL is still there: a kill after
		// closing (which deletes the log) but before removing it would
		// be a false alarm at the next start.
		err = errors.Join(removeSynced(filepath.Join(s.dir, RunningName)), s.closeKeysFile(), s.db.Close(), s.rdb.Close(), s.lock.Close())
	} else {
		err = errors.Join(s.closeKeysFile(), s.db.Close(), s.rdb.Close())
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: close: %w", err)
	}
	return nil
}

// write runs fn in an immediate transaction, shared with the writes queued
// at the same time, and returns once that transaction is committed and
// synced. fn gets a context that is not cancelled with ctx: a statement
// interrupted inside a shared transaction would roll back the others' work.
// A write whose ctx ends before it starts is not run.
func (s *Store) write(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.c.do(ctx, &op{fn: fn, sync: true})
}

// writeOne is write for fn that writes with at most one statement: it
// needs no savepoint, since a failed statement undoes itself. Without sync
// it is for a record whose loss on power failure is harmless: logged (it
// survives kill -9) but synced only with the next synced commit.
func (s *Store) writeOne(ctx context.Context, sync bool, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.c.do(ctx, &op{fn: fn, sync: sync, oneStatement: true})
}

// OnStateChange sets fn to be called after each committed write that gives
// a batch a new state, with the state it left ("" for a new batch), and
// after each write of results (from == b.State): its progress. Every
// change passes through here, whoever makes it, so an operator's log hangs
// here. fn runs outside the write and must not write to the store. Set it
// before the store is used.
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

// touched tells the view cache that a write to the batch has returned,
// committed or not.
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

// collect reads every row of a query's rows (err is the query's own) with
// scan, as eachRow does; a failed scan is dbErr(op).
func collect[T any](rows *sql.Rows, err error, op string, scan func(scanner) (T, error)) ([]T, error) {
	var out []T
	err = eachRow(rows, err, op, func(rows *sql.Rows) error {
		v, err := scan(rows)
		out = append(out, v)
		return dbErr(op, err)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
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
	se, ok := errors.AsType[*sqlite.Error](err)
	if !ok {
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
	se, ok := errors.AsType[*sqlite.Error](err)
	return ok && se.Code() == ext
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
