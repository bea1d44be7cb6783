// Package sqlitestore is the embedded, durable store.Store of `evs serve`:
// one SQLite database file in a data directory, written through the pure-Go
// driver so the binary needs no C toolchain.
//
// Several processes may open the same directory at once (`evs keys create`
// while `evs serve` runs): the database runs in WAL mode, every write is an
// immediate transaction, and a busy database is waited for rather than
// failed. Every acknowledged write is synced to disk (synchronous=FULL), so it
// survives kill -9 and power loss.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
	db  *sql.DB
	now func() time.Time
	// writeMu serializes this process's write transactions so they queue
	// in Go instead of spinning in SQLite's busy handler; other processes
	// are still waited for through busy_timeout.
	writeMu sync.Mutex
}

var _ store.Store = (*Store)(nil)

// Open opens (creating them if needed) dir and the database dir/evs.db,
// migrates its schema to the current version and returns the store. now is
// the store's clock, used for batch expiry.
func Open(ctx context.Context, dir string, now func() time.Time) (*Store, error) {
	return open(ctx, dir, now, busyTimeout)
}

// open is Open with the time a write waits for another process's lock.
func open(ctx context.Context, dir string, now func() time.Time, busy time.Duration) (*Store, error) {
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
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Add("_pragma", "cache_size(-16000)")
	q.Add("_pragma", "temp_store(MEMORY)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", filepath.Join(dir, FileName)+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open: %w", err)
	}
	s := &Store{db: db, now: now}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
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

// Close closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("sqlitestore: close: %w", err)
	}
	return nil
}

// write runs fn in one immediate transaction and commits it.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return dbErr("begin", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return dbErr("commit", err)
	}
	return nil
}

// dbErr classifies a database error: a database that is busy or cannot be
// read or written is unavailable (the caller may retry); anything else is a
// fault, wrapped with what was being done.
func dbErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *evs.Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || unavailable(err) {
		return evs.Wrap(fmt.Errorf("sqlitestore: %s: %w", op, err), evs.CodeUnavailable, "The store is unavailable; retry.")
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
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
