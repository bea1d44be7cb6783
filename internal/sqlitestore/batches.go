package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// itemsPerInsert is how many items one INSERT statement carries: one
// statement per item would make a 50,000-address batch spend most of its
// time crossing into SQLite.
const itemsPerInsert = 500

// resultsPerInsert is how many results one INSERT statement carries.
const resultsPerInsert = 200

const batchCols = `id, account_id, mode, state, error, created_at, completed_at, expires_at,
	total, duplicates, processed, deliverable, undeliverable, risky, unknown`

func scanBatch(row scanner) (evs.Batch, error) {
	var (
		b                evs.Batch
		created, expires int64
		completed        sql.NullInt64
	)
	c := &b.Counters
	err := row.Scan(&b.ID, &b.AccountID, &b.Mode, &b.State, &b.Error, &created, &completed, &expires,
		&c.Total, &c.Duplicates, &c.Processed, &c.Deliverable, &c.Undeliverable, &c.Risky, &c.Unknown)
	if err != nil {
		return evs.Batch{}, err
	}
	b.CreatedAt, b.CompletedAt, b.ExpiresAt = fromMillis(created), fromNullMillis(completed), fromMillis(expires)
	return b, nil
}

func batchNotFound() error { return evs.Errorf(evs.CodeNotFound, "No such request.") }

// CreateBatch stores b and its items in one transaction.
func (s *Store) CreateBatch(ctx context.Context, b evs.Batch, items []evs.Item) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		c := b.Counters
		_, err := tx.ExecContext(ctx, `INSERT INTO batches (id, account_id, mode, state, error, created_at, completed_at, expires_at,
			items, total, duplicates, processed, deliverable, undeliverable, risky, unknown)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			b.ID, b.AccountID, b.Mode, b.State, b.Error, millis(b.CreatedAt), nullMillis(b.CompletedAt), millis(b.ExpiresAt),
			len(items), c.Total, c.Duplicates, c.Processed, c.Deliverable, c.Undeliverable, c.Risky, c.Unknown)
		if constraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
			return evs.Errorf(evs.CodeInvalidState, "The request already exists.")
		}
		if err != nil {
			return dbErr("create batch", err)
		}
		if err := createDelivery(ctx, tx, b); err != nil {
			return err
		}
		var full *sql.Stmt
		for len(items) > 0 {
			n := min(len(items), itemsPerInsert)
			stmt := full
			if stmt == nil || n < itemsPerInsert {
				q := `INSERT INTO items (batch_id, seq, email, domain) VALUES ` +
					strings.Repeat(`(?, ?, ?, ?), `, n-1) + `(?, ?, ?, ?)`
				if stmt, err = tx.PrepareContext(ctx, q); err != nil {
					return dbErr("create batch items", err)
				}
				defer stmt.Close()
				if n == itemsPerInsert {
					full = stmt
				}
			}
			args := make([]any, 0, 4*n)
			for _, it := range items[:n] {
				args = append(args, b.ID, it.Seq, it.Email, it.Domain)
			}
			if _, err := stmt.ExecContext(ctx, args...); err != nil {
				if constraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
					return evs.Errorf(evs.CodeInvalidRequest, "Two items of the request have the same sequence number.")
				}
				return dbErr("create batch items", err)
			}
			items = items[n:]
		}
		return nil
	})
}

// Batch returns the batch id of account, or CodeNotFound, also once expired.
func (s *Store) Batch(ctx context.Context, accountID, id string) (evs.Batch, error) {
	return s.batch(ctx, s.db, accountID, id)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// batch reads a live batch through q.
func (s *Store) batch(ctx context.Context, q querier, accountID, id string) (evs.Batch, error) {
	b, err := scanBatch(q.QueryRowContext(ctx,
		`SELECT `+batchCols+` FROM batches WHERE id = ? AND account_id = ? AND expires_at > ?`,
		id, accountID, millis(s.now())))
	if errors.Is(err, sql.ErrNoRows) {
		return evs.Batch{}, batchNotFound()
	}
	if err != nil {
		return evs.Batch{}, dbErr("read batch", err)
	}
	return b, nil
}

// TransitionBatch moves the batch to `to` if its state is in from. A final
// state is never left, whatever from says.
func (s *Store) TransitionBatch(ctx context.Context, accountID, id string, from []evs.State, to evs.State, errMsg string, now time.Time) (evs.Batch, error) {
	var out evs.Batch
	err := s.write(ctx, func(tx *sql.Tx) error {
		b, err := s.batch(ctx, tx, accountID, id)
		if err != nil {
			return err
		}
		if b.State.Final() || !slices.Contains(from, b.State) {
			return evs.Errorf(evs.CodeInvalidState, "The request is %s.", b.State)
		}
		if to == evs.StateCompleted && b.Counters.Processed < b.Counters.Total-b.Counters.Duplicates {
			// A completed batch has every result (API contract, section 3);
			// PutResults completes it when the last one is written.
			return evs.Errorf(evs.CodeInvalidState, "The request still has items without a result.")
		}
		var completed sql.NullInt64
		if to.Final() {
			completed = nullMillis(now)
		}
		out, err = scanBatch(tx.QueryRowContext(ctx,
			`UPDATE batches SET state = ?, error = ?, completed_at = ? WHERE id = ? RETURNING `+batchCols,
			to, errMsg, completed, id))
		return dbErr("transition batch", err)
	})
	return out, err
}

// counterCols names the counter column of each outcome label.
var counterCols = map[string]string{
	"deliverable":   "deliverable",
	"undeliverable": "undeliverable",
	"risky":         "risky",
	"unknown":       "unknown",
}

// PutResults writes the results that are not written yet and adds them to
// the counters, all in one transaction: a crash leaves either all or none of
// them, never results without their count.
func (s *Store) PutResults(ctx context.Context, accountID, id string, results []evs.Result, now time.Time) (evs.Batch, error) {
	encoded := make([][]byte, len(results))
	for i, r := range results {
		if !r.Decision.Reason.Valid() {
			return evs.Batch{}, evs.Errorf(evs.CodeInvalidRequest, "Unknown result reason %q.", r.Decision.Reason)
		}
		b, err := store.EncodeDecision(r.Decision)
		if err != nil {
			return evs.Batch{}, err
		}
		encoded[i] = b
	}
	var out evs.Batch
	err := s.write(ctx, func(tx *sql.Tx) error {
		b, err := s.batch(ctx, tx, accountID, id)
		if err != nil {
			return err
		}
		out = b
		if b.State.Final() || len(results) == 0 {
			return nil
		}
		added := map[string]int{}
		n := 0
		var full *sql.Stmt
		for rest := results; len(rest) > 0; {
			k := min(len(rest), resultsPerInsert)
			stmt := full
			if stmt == nil || k < resultsPerInsert {
				// ON CONFLICT DO NOTHING skips results written before;
				// RETURNING names exactly the rows that were new, to count.
				q := `INSERT INTO results (batch_id, seq, email, status, decision) VALUES ` +
					strings.Repeat(`(?, ?, ?, ?, ?), `, k-1) + `(?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING status`
				if stmt, err = tx.PrepareContext(ctx, q); err != nil {
					return dbErr("write results", err)
				}
				defer stmt.Close()
				if k == resultsPerInsert {
					full = stmt
				}
			}
			args := make([]any, 0, 5*k)
			for i, r := range rest[:k] {
				args = append(args, id, r.Seq, r.Email, string(r.Status()), encoded[len(results)-len(rest)+i])
			}
			if err := countInserted(ctx, stmt, args, added, &n); err != nil {
				return err
			}
			rest = rest[k:]
		}
		if n == 0 {
			return nil
		}
		// The batch completes in the same statement that counts its last
		// result, so no reader sees all results counted but the batch running.
		out, err = scanBatch(tx.QueryRowContext(ctx, `UPDATE batches SET
			processed = processed + ?,
			deliverable = deliverable + ?, undeliverable = undeliverable + ?, risky = risky + ?, unknown = unknown + ?,
			state = CASE WHEN processed + ? >= items THEN ? ELSE state END,
			completed_at = CASE WHEN processed + ? >= items THEN ? ELSE completed_at END
			WHERE id = ? RETURNING `+batchCols,
			n, added["deliverable"], added["undeliverable"], added["risky"], added["unknown"],
			n, evs.StateCompleted, n, millis(now), id))
		return dbErr("count results", err)
	})
	return out, err
}

// countInserted runs the results INSERT and counts the rows it wrote by
// status into added and n.
func countInserted(ctx context.Context, stmt *sql.Stmt, args []any, added map[string]int, n *int) error {
	rows, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		return resultsErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var status string
		if err := rows.Scan(&status); err != nil {
			return dbErr("write results", err)
		}
		added[status]++
		*n++
	}
	return resultsErr(rows.Err())
}

func resultsErr(err error) error {
	if constraint(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY) {
		return evs.Errorf(evs.CodeInvalidRequest, "A result is for an item the request does not have.")
	}
	return dbErr("write results", err)
}

// Results returns up to limit results with Seq > afterSeq in Seq order,
// only those of status when status is not empty.
func (s *Store) Results(ctx context.Context, accountID, id string, afterSeq, limit int, status evs.Status) ([]evs.Result, error) {
	q := `SELECT seq, email, status, decision FROM results WHERE batch_id = ? AND seq > ? ORDER BY seq LIMIT ?`
	args := []any{id, afterSeq, max(limit, 0)}
	if status != "" {
		q = `SELECT seq, email, status, decision FROM results WHERE batch_id = ? AND status = ? AND seq > ? ORDER BY seq LIMIT ?`
		args = []any{id, status, afterSeq, max(limit, 0)}
	}
	var out []evs.Result
	err := s.read(ctx, accountID, id, q, args, func(rows *sql.Rows) error {
		var (
			r       evs.Result
			status  string
			encoded []byte
		)
		if err := rows.Scan(&r.Seq, &r.Email, &status, &encoded); err != nil {
			return err
		}
		d, err := store.DecodeDecision(r.Email, encoded)
		if err != nil {
			return err
		}
		r.Decision = d
		out = append(out, r)
		return nil
	})
	return out, err
}

// PendingItems returns up to limit items with Seq > afterSeq that have no
// result yet, in Seq order.
func (s *Store) PendingItems(ctx context.Context, accountID, id string, afterSeq, limit int) ([]evs.Item, error) {
	q := `SELECT i.seq, i.email, i.domain FROM items i
		WHERE i.batch_id = ? AND i.seq > ?
		AND NOT EXISTS (SELECT 1 FROM results r WHERE r.batch_id = i.batch_id AND r.seq = i.seq)
		ORDER BY i.seq LIMIT ?`
	var out []evs.Item
	err := s.read(ctx, accountID, id, q, []any{id, afterSeq, max(limit, 0)}, func(rows *sql.Rows) error {
		var it evs.Item
		if err := rows.Scan(&it.Seq, &it.Email, &it.Domain); err != nil {
			return err
		}
		out = append(out, it)
		return nil
	})
	return out, err
}

// read runs query in one read transaction after checking that the batch is
// live, so a batch swept in between cannot look like an empty one.
func (s *Store) read(ctx context.Context, accountID, id, query string, args []any, scan func(*sql.Rows) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return dbErr("begin read", err)
	}
	defer tx.Rollback()
	if _, err := s.batch(ctx, tx, accountID, id); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return dbErr("read batch rows", err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return dbErr("read batch rows", err)
		}
	}
	return dbErr("read batch rows", rows.Err())
}

// UnfinishedBatches lists the live batches in state queued or running, of
// every account, oldest first.
func (s *Store) UnfinishedBatches(ctx context.Context) ([]evs.Batch, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT `+batchCols+` FROM batches WHERE state IN (?, ?) AND expires_at > ? ORDER BY created_at, id`,
		evs.StateQueued, evs.StateRunning, millis(s.now()))
	if err != nil {
		return nil, dbErr("list unfinished batches", err)
	}
	defer rows.Close()
	var out []evs.Batch
	for rows.Next() {
		b, err := scanBatch(rows)
		if err != nil {
			return nil, dbErr("list unfinished batches", err)
		}
		out = append(out, b)
	}
	return out, dbErr("list unfinished batches", rows.Err())
}

// Sweep deletes the batches (with their items and results) and idempotency
// records whose expiry has passed by the store's clock: the embedded store's
// TTL, which `evs serve` runs periodically. It returns how many batches and
// records it deleted.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	var n int64
	now := millis(s.now())
	err := s.write(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			`DELETE FROM batches WHERE expires_at <= ?`,
			`DELETE FROM idempotency WHERE expires_at <= ?`,
		} {
			res, err := tx.ExecContext(ctx, q, now)
			if err != nil {
				return dbErr("sweep", err)
			}
			k, err := res.RowsAffected()
			if err != nil {
				return dbErr("sweep", err)
			}
			n += k
		}
		return nil
	})
	return int(n), err
}
