package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// The stored-address limit (EVS_MAX_STORED_ADDRESSES): an account's stored
// addresses are the sum of counters.total over its batches not yet
// expired. Summing the batches at each creation would cost a scan of all
// of an account's batches inside the single writer, and an account may
// keep millions of small ones; so stored_addresses keeps the sum per
// account, added to by every creation and taken from by the sweep, and
// the exact figure is that counter less the batches that expired since the
// last sweep: a short range of the (account_id, expires_at) index.

const storedSchema = `
CREATE TABLE stored_addresses (
	account_id TEXT PRIMARY KEY,
	total      INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO stored_addresses (account_id, total)
	SELECT account_id, SUM(total) FROM batches GROUP BY account_id HAVING SUM(total) > 0;
CREATE INDEX batches_account_expires ON batches (account_id, expires_at, total);
`

const (
	qStored = `SELECT COALESCE((SELECT total FROM stored_addresses WHERE account_id = ?1), 0)
		- COALESCE((SELECT SUM(total) FROM batches WHERE account_id = ?1 AND expires_at <= ?2), 0)`
	qAddStored = `INSERT INTO stored_addresses (account_id, total) VALUES (?, ?)
		ON CONFLICT (account_id) DO UPDATE SET total = total + excluded.total`
	// qFreedBy walks the account's live batches, first to expire first, to
	// tell when enough will have gone.
	qFreedBy = `SELECT total, expires_at FROM batches WHERE account_id = ? AND expires_at > ?
		ORDER BY expires_at LIMIT ?`
	qSweepStored = `UPDATE stored_addresses SET total = total -
		(SELECT SUM(b.total) FROM batches b WHERE b.account_id = stored_addresses.account_id AND b.expires_at <= ?1)
		WHERE account_id IN (SELECT account_id FROM batches WHERE expires_at <= ?1)`
	qDropStored = `DELETE FROM stored_addresses WHERE total <= 0`
)

// Bounds of the Retry-After of a refusal: it is the time until enough of
// the account's batches expire, but a client is told to look again at
// least daily, and the walk that finds the time reads at most
// freedByRows batches (past them the time is a lower bound, which is
// still a correct time to retry: the retry is checked again).
const (
	maxStoredRetry = 24 * time.Hour
	freedByRows    = 1000
)

// StoredAddresses returns the account's stored addresses: the sum of
// counters.total over its batches not expired by the store's clock.
func (s *Store) StoredAddresses(ctx context.Context, accountID string) (int, error) {
	var n int
	err := s.rdb.QueryRowContext(ctx, qStored, accountID, millis(s.now())).Scan(&n)
	return n, dbErr("count stored addresses", err)
}

// checkStored refuses adding n addresses to the account's stored
// addresses when that takes them past limit.
func (s *Store) checkStored(ctx context.Context, tx *sql.Tx, accountID string, n, limit int, now time.Time) error {
	var stored int
	if err := s.row(ctx, tx, qStored, accountID, millis(now)).Scan(&stored); err != nil {
		return dbErr("count stored addresses", err)
	}
	if stored+n <= limit {
		return nil
	}
	if n > limit {
		return &store.LimitError{Err: evs.Errorf(evs.CodeRateLimited, store.StoredAddressesTooMany, n, limit), Retry: maxStoredRetry}
	}
	at, err := freedBy(ctx, tx, accountID, stored+n-limit, now)
	if err != nil {
		return err
	}
	retry := min(max(at.Sub(now), time.Second), maxStoredRetry)
	return &store.LimitError{
		Err:   evs.Errorf(evs.CodeRateLimited, store.StoredAddressesFull, limit, stored, n, now.Add(retry).UTC().Format(time.RFC3339)),
		Retry: retry,
	}
}

// freedBy is when at least need of the account's stored addresses will
// have expired (a lower bound past freedByRows batches).
func freedBy(ctx context.Context, tx *sql.Tx, accountID string, need int, now time.Time) (time.Time, error) {
	rows, err := tx.QueryContext(ctx, qFreedBy, accountID, millis(now), freedByRows)
	if err != nil {
		return time.Time{}, dbErr("find the account's oldest batches", err)
	}
	defer rows.Close()
	at := now
	for rows.Next() {
		var total, expires int64
		if err := rows.Scan(&total, &expires); err != nil {
			return time.Time{}, dbErr("find the account's oldest batches", err)
		}
		at = time.UnixMilli(expires)
		if need -= int(total); need <= 0 {
			break
		}
	}
	return at, dbErr("find the account's oldest batches", rows.Err())
}

// addStored adds a new batch's n addresses to the account's counter.
func (s *Store) addStored(ctx context.Context, tx *sql.Tx, accountID string, n int) error {
	if n <= 0 {
		return nil
	}
	_, err := s.exec(ctx, tx, qAddStored, accountID, n)
	return dbErr("count stored addresses", err)
}

// sweepStored takes the batches expired by now off their accounts'
// counters; the caller then deletes them in the same transaction.
func sweepStored(ctx context.Context, tx *sql.Tx, now int64) error {
	if _, err := tx.ExecContext(ctx, qSweepStored, now); err != nil {
		return dbErr("sweep stored addresses", err)
	}
	_, err := tx.ExecContext(ctx, qDropStored)
	return dbErr("sweep stored addresses", err)
}
