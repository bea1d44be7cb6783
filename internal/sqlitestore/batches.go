package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Rows per INSERT: one statement per item would make a 50,000-address
// batch spend most of its time crossing into SQLite.
const (
	itemsPerInsert   = 500
	resultsPerInsert = 200
)

const batchCols = `id, account_id, mode, state, error, created_at, completed_at, expires_at,
	total, duplicates, processed, deliverable, undeliverable, risky, unknown, max_age, name, lanes`

// Queries of this file; the ones of every call are prepared at Open.
const (
	qCreateBatch = `INSERT INTO batches (id, account_id, mode, state, error, created_at, completed_at, expires_at,
			items, total, duplicates, processed, deliverable, undeliverable, risky, unknown, max_age, name, lanes)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING key`
	qBatch      = `SELECT key, ` + batchCols + ` FROM batches WHERE id = ? AND account_id = ? AND expires_at > ?`
	qTransition = `UPDATE batches SET state = ?, error = ?, completed_at = ? WHERE id = ? RETURNING ` + batchCols
	// The batch completes in the same statement that counts its last
	// result, so no reader sees all results counted but the batch running.
	qCount = `UPDATE batches SET
			processed = processed + ?,
			deliverable = deliverable + ?, undeliverable = undeliverable + ?, risky = risky + ?, unknown = unknown + ?,
			state = CASE WHEN processed + ? >= items THEN ? ELSE state END,
			completed_at = CASE WHEN processed + ? >= items THEN ? ELSE completed_at END
			WHERE key = ? RETURNING ` + batchCols
	// A result's address is its item's: results do not repeat it.
	qResults = `SELECT r.seq, i.email, r.decision FROM results r JOIN items i ON i.batch = r.batch AND i.seq = r.seq
		WHERE r.batch = ? AND r.seq > ? ORDER BY r.seq LIMIT ?`
	qResultsByStatus = `SELECT r.seq, i.email, r.decision FROM results r JOIN items i ON i.batch = r.batch AND i.seq = r.seq
		WHERE r.batch = ? AND r.status = ? AND r.seq > ? ORDER BY r.seq LIMIT ?`
	qInput = `SELECT seq, email, domain FROM items WHERE batch = ? AND seq >= ? ORDER BY seq LIMIT ?`
	// The given seqs (a JSON array) that have no result.
	qWithout = `SELECT j.value FROM json_each(?2) j
		WHERE NOT EXISTS (SELECT 1 FROM results r WHERE r.batch = ?1 AND r.seq = j.value)`
	qFirstPending = `SELECT i.seq FROM items i WHERE i.batch = ? AND i.seq > ? AND i.seq <= ?
		AND NOT EXISTS (SELECT 1 FROM results r WHERE r.batch = i.batch AND r.seq = i.seq)
		ORDER BY i.seq LIMIT 1`
	qStatusCounts = `SELECT status, COUNT(*) FROM results WHERE batch = ? GROUP BY status`
	qUnfinished   = `SELECT ` + batchCols + ` FROM batches WHERE state IN (?, ?) AND expires_at > ? ORDER BY created_at, id`
	// The row value comparison walks batches_account_created from the
	// position on; the first page starts after (MaxInt64, "").
	qList = `SELECT ` + batchCols + ` FROM batches
		WHERE account_id = ? AND (created_at, id) < (?, ?) AND expires_at > ?
		ORDER BY created_at DESC, id DESC LIMIT ?`
)

func insertItems(n int) string {
	return `INSERT INTO items (batch, seq, email, domain) VALUES ` +
		strings.Repeat(`(?, ?, ?, ?), `, n-1) + `(?, ?, ?, ?)`
}

// insertResults is the INSERT of n results, skipping those written before.
// It returns no rows: RETURNING cost a row read back per result, and
// the rows-affected count tells the rare write that needs a recount.
func insertResults(n int) string {
	return `INSERT INTO results (batch, seq, status, decision) VALUES ` +
		strings.Repeat(`(?, ?, ?, ?), `, n-1) + `(?, ?, ?, ?) ON CONFLICT DO NOTHING`
}

// Prepared when the store opens.
var (
	writerQueries = []string{
		qCreateAccount, qCreateKey, qRevokeKey,
		qClaim, qReadClaim, qComplete, qRelease, qPut,
		qCreateBatch, qBatch, qTransition, qCount,
		insertItems(itemsPerInsert), insertResults(resultsPerInsert),
		qChargeQuota, qRefundQuota, qAddQuota, qKeepDecision,
	}
	readerQueries = []string{
		qAccount, qAccountByName, qCountAccounts, qKeyByHash, qListKeys,
		qBatch, qResults, qResultsByStatus, qInput, qWithout, qFirstPending, qUnfinished, qList, qDelivery, qBatchView,
		qLookup, qPing, qCachedDecision,
		qAddressOutcomes + "(?)", qDomainCounts + "(?)" + qGroupDomain, qSharedDomainCounts + "(?)" + qGroupDomain,
	}
)

func scanBatch(row scanner, first ...any) (evs.Batch, error) {
	var (
		b                evs.Batch
		created, expires int64
		completed        sql.NullInt64
		maxAge           int64
		lanes            string
	)
	c := &b.Counters
	err := row.Scan(append(first, &b.ID, &b.AccountID, &b.Mode, &b.State, &b.Error, &created, &completed, &expires,
		&c.Total, &c.Duplicates, &c.Processed, &c.Deliverable, &c.Undeliverable, &c.Risky, &c.Unknown, &maxAge, &b.Name, &lanes)...)
	if err != nil {
		return evs.Batch{}, err
	}
	b.Lanes = store.LanesOf(lanes)
	b.MaxAge = store.MaxAgeOf(maxAge)
	b.CreatedAt, b.CompletedAt, b.ExpiresAt = fromMillis(created), fromNullMillis(completed), fromMillis(expires)
	return b, nil
}

// CreateBatch stores b and its items in one transaction.
func (s *Store) CreateBatch(ctx context.Context, b evs.Batch, items []evs.Item) error {
	return s.CreateBatchWithin(ctx, b, items, 0)
}

const activeQuery = `SELECT COUNT(*) FROM batches WHERE state IN (?, ?) AND account_id = ? AND expires_at > ?`

// ActiveBatches counts the account's live queued or running batches.
func (s *Store) ActiveBatches(ctx context.Context, accountID string) (int, error) {
	var n int
	err := s.rdb.QueryRowContext(ctx, activeQuery, evs.StateQueued, evs.StateRunning, accountID, millis(s.now())).Scan(&n)
	return n, dbErr("count active batches", err)
}

// CreateBatchWithin stores b and its items unless the account already has
// maxActive active batches. Writes are serialised, so the count taken
// inside the write transaction is exact.
func (s *Store) CreateBatchWithin(ctx context.Context, b evs.Batch, items []evs.Item, maxActive int) (err error) {
	if err := store.CheckNewBatch(b, items); err != nil {
		return err
	}
	defer s.touched(b.AccountID, b.ID)
	defer func() {
		if err == nil {
			s.stateChanged(b, "")
		}
	}()
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		if maxActive > 0 {
			var n int
			err := tx.QueryRowContext(ctx, activeQuery, evs.StateQueued, evs.StateRunning, b.AccountID, millis(now)).Scan(&n)
			if err != nil {
				return dbErr("count active batches", err)
			}
			if n >= maxActive {
				return evs.Errorf(evs.CodeRateLimited, store.ActiveBatchesFull, n)
			}
		}
		c := b.Counters
		var key int64
		err := s.row(ctx, tx, qCreateBatch,
			b.ID, b.AccountID, b.Mode, b.State, b.Error, millis(b.CreatedAt), nullMillis(b.CompletedAt), millis(b.ExpiresAt),
			len(items), c.Total, c.Duplicates, c.Processed, c.Deliverable, c.Undeliverable, c.Risky, c.Unknown, store.MaxAgeMillis(b.MaxAge), b.Name, store.LanesJSON(b.Lanes)).Scan(&key)
		if constraint(err, sqlite3.SQLITE_CONSTRAINT_UNIQUE) {
			return store.BatchExists()
		}
		if err != nil {
			return dbErr("create batch", err)
		}
		if err := createDelivery(ctx, tx, b); err != nil {
			return err
		}
		args := make([]any, 0, 4*itemsPerInsert)
		for chunk := range slices.Chunk(items, itemsPerInsert) {
			args = args[:0]
			for _, it := range chunk {
				args = append(args, key, it.Seq, it.Email, it.Domain)
			}
			if _, err := s.exec(ctx, tx, insertItems(len(chunk)), args...); err != nil {
				return dbErr("create batch items", err)
			}
		}
		return nil
	})
}

// Batch returns the batch id of account, or CodeNotFound, also once expired.
func (s *Store) Batch(ctx context.Context, accountID, id string) (evs.Batch, error) {
	b, _, err := s.batch(ctx, s.rstmt(qBatch), accountID, id)
	return b, err
}

// batchTx reads a live batch, and its key, inside the write transaction.
func (s *Store) batchTx(ctx context.Context, tx *sql.Tx, accountID, id string) (evs.Batch, int64, error) {
	st, err := s.wstmt(ctx, tx, qBatch)
	if err != nil {
		return evs.Batch{}, 0, dbErr("read batch", err)
	}
	return s.batch(ctx, st, accountID, id)
}

// batch reads a live batch and its key with st, a prepared qBatch.
func (s *Store) batch(ctx context.Context, st *sql.Stmt, accountID, id string) (evs.Batch, int64, error) {
	var key int64
	b, err := scanBatch(st.QueryRowContext(ctx, id, accountID, millis(s.now())), &key)
	return b, key, rowErr(err, "read batch", store.NoBatch)
}

// TransitionBatch moves the batch to `to` in one write transaction.
func (s *Store) TransitionBatch(ctx context.Context, accountID, id string, from []evs.State, to evs.State, errMsg string, now time.Time) (evs.Batch, error) {
	defer s.touched(accountID, id)
	var out evs.Batch
	var before evs.State
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		b, _, err := s.batchTx(ctx, tx, accountID, id)
		if err != nil {
			return err
		}
		before = b.State
		if err := evs.CheckTransition(b, from, to); err != nil {
			return err
		}
		var completed sql.NullInt64
		if to.Final() {
			completed = nullMillis(now)
		}
		out, err = scanBatch(s.row(ctx, tx, qTransition, to, errMsg, completed, id))
		return dbErr("transition batch", err)
	})
	if err == nil {
		s.stateChanged(out, before)
	}
	return out, err
}

// PutResults writes the results that are not written yet and adds them to
// the counters in one transaction: never results without their count.
func (s *Store) PutResults(ctx context.Context, accountID, id string, results []evs.Result, now time.Time) (evs.Batch, error) {
	// Written in seq order (they arrive domain by domain), so the inserts
	// walk the b-trees left to right; the order is sorted, not the large
	// results.
	order := make([]int, len(results))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return results[a].Seq - results[b].Seq })
	encoded, err := store.EncodeResults(results)
	if err != nil {
		return evs.Batch{}, err
	}
	var out evs.Batch
	var before evs.State
	defer s.touched(accountID, id)
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		b, key, err := s.batchTx(ctx, tx, accountID, id)
		if err != nil {
			return err
		}
		out, before = b, b.State
		if b.State.Final() {
			return nil
		}
		var added counts
		recount := false // some results were there already: count the table
		args := make([]any, 0, 5*resultsPerInsert)
		for chunk := range slices.Chunk(order, resultsPerInsert) {
			args = args[:0]
			for _, i := range chunk {
				r := &results[i]
				code := statusCode(r.Status())
				args = append(args, key, r.Seq, code, encoded[i])
				added.n++
				added.by[code]++
			}
			n, err := changed(s.exec(ctx, tx, insertResults(len(chunk)), args...))
			if err != nil {
				if constraint(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY) {
					return store.NoSuchItem()
				}
				return dbErr("write results", err)
			}
			recount = recount || n != int64(len(chunk))
		}
		if recount {
			// What the table holds counts: the batch is as it was
			// unless some results are new.
			if added, err = s.recount(ctx, tx, key, b); err != nil || added.n == 0 {
				return err
			}
		}
		// With no results at all, a batch that has them all (one of no
		// items) completes too, as the store contract says.
		out, err = scanBatch(s.row(ctx, tx, qCount,
			added.n, added.by[0], added.by[1], added.by[2], added.by[3],
			added.n, evs.StateCompleted, added.n, millis(now), key))
		return dbErr("count results", err)
	})
	if err == nil {
		s.batchWritten(out, before) // a completion, or progress (from == to)
	}
	return out, err
}

// Result statuses as stored: a number, so the status index stays small.
var statusCodes = [...]evs.Status{evs.Deliverable, evs.Undeliverable, evs.Risky, evs.Unknown}

func statusCode(st evs.Status) int {
	if i := slices.Index(statusCodes[:], st); i >= 0 {
		return i
	}
	return len(statusCodes) - 1 // unknown
}

// counts are the results an INSERT wrote, in all and by status code.
type counts struct {
	n  int
	by [len(statusCodes)]int
}

// recount counts the results of the batch (b, of row key) in the table and
// returns what they add to its counters.
func (s *Store) recount(ctx context.Context, tx *sql.Tx, key int64, b evs.Batch) (counts, error) {
	c := b.Counters
	added := counts{n: -c.Processed, by: [len(statusCodes)]int{-c.Deliverable, -c.Undeliverable, -c.Risky, -c.Unknown}}
	rows, err := tx.QueryContext(ctx, qStatusCounts, key)
	err = eachRow(rows, err, "count results", func(rows *sql.Rows) error {
		var code, n int
		if err := rows.Scan(&code, &n); err != nil {
			return dbErr("count results", err)
		}
		added.n += n
		added.by[min(max(code, 0), len(statusCodes)-1)] += n
		return nil
	})
	return added, err
}

// Results reads a page of results (store.Batches); their Email is the item's.
func (s *Store) Results(ctx context.Context, accountID, id string, afterSeq, limit int, status evs.Status) ([]evs.Result, error) {
	q, args := qResults, func(key int64) []any { return []any{key, afterSeq, max(limit, 0)} }
	if status != "" {
		q, args = qResultsByStatus, func(key int64) []any { return []any{key, statusCode(status), afterSeq, max(limit, 0)} }
	}
	var out []evs.Result
	err := s.read(ctx, accountID, id, q, args, func(rows *sql.Rows) error {
		var (
			r       evs.Result
			encoded sql.RawBytes
		)
		if err := rows.Scan(&r.Seq, &r.Email, &encoded); err != nil {
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

// InputItems returns up to limit items with seq >= from in seq order (a
// position here is a seq) and the seq after them, or -1 at the end.
func (s *Store) InputItems(ctx context.Context, accountID, id string, from, limit int) ([]evs.Item, int, error) {
	if limit <= 0 || from < 0 {
		return nil, -1, nil
	}
	var out []evs.Item
	args := func(key int64) []any { return []any{key, from, limit} }
	err := s.read(ctx, accountID, id, qInput, args, func(rows *sql.Rows) error {
		var it evs.Item
		if err := rows.Scan(&it.Seq, &it.Email, &it.Domain); err != nil {
			return err
		}
		out = append(out, it)
		return nil
	})
	if err != nil || len(out) < limit {
		return out, -1, err
	}
	return out, out[len(out)-1].Seq + 1, nil
}

// WithoutResults returns the given items that have no result yet, in order.
func (s *Store) WithoutResults(ctx context.Context, accountID, id string, items []evs.Item) ([]evs.Item, error) {
	seqs := make([]int, len(items))
	for i, it := range items {
		seqs[i] = it.Seq
	}
	js, _ := json.Marshal(seqs) // ints: cannot fail
	open := make(map[int]bool, len(items))
	err := s.read(ctx, accountID, id, qWithout, func(key int64) []any { return []any{key, string(js)} }, func(rows *sql.Rows) error {
		var seq int
		err := rows.Scan(&seq)
		open[seq] = true
		return err
	})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(slices.Clone(items), func(it evs.Item) bool { return !open[it.Seq] }), nil
}

// FirstPending returns the smallest seq in (after, upTo] without a result,
// or -1.
func (s *Store) FirstPending(ctx context.Context, accountID, id string, after, upTo int) (int, error) {
	first := -1
	err := s.read(ctx, accountID, id, qFirstPending, func(key int64) []any { return []any{key, after, upTo} }, func(rows *sql.Rows) error {
		return rows.Scan(&first)
	})
	return first, err
}

// read runs query, a reader query, with args(the batch's key) in one read
// transaction after checking that the batch is live, so a batch swept in
// between cannot look like an empty one.
func (s *Store) read(ctx context.Context, accountID, id, query string, args func(key int64) []any, scan func(*sql.Rows) error) error {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return dbErr("begin read", err)
	}
	defer tx.Rollback()
	_, key, err := s.batch(ctx, tx.StmtContext(ctx, s.rstmt(qBatch)), accountID, id)
	if err != nil {
		return err
	}
	rows, err := tx.StmtContext(ctx, s.rstmt(query)).QueryContext(ctx, args(key)...)
	return eachRow(rows, err, "read batch rows", func(rows *sql.Rows) error {
		return dbErr("read batch rows", scan(rows))
	})
}

// UnfinishedBatches lists the live batches in state queued or running, of
// every account, oldest first.
func (s *Store) UnfinishedBatches(ctx context.Context) ([]evs.Batch, error) {
	return s.queryBatches(ctx, "list unfinished batches", qUnfinished, evs.StateQueued, evs.StateRunning, millis(s.now()))
}

// queryBatches runs the reader query q, whose rows are batchCols.
func (s *Store) queryBatches(ctx context.Context, what, q string, args ...any) ([]evs.Batch, error) {
	rows, err := s.rstmt(q).QueryContext(ctx, args...)
	return collect(rows, err, what, func(row scanner) (evs.Batch, error) { return scanBatch(row) })
}

// Sweep deletes the batches (with their items and results), records and
// exports whose expiry has passed by the store's clock (the embedded
// store's TTL, run periodically), rebuilds the filters without them, and
// returns how many rows it deleted.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	if s.views != nil {
		defer s.views.wroteAll()
	}
	var n int64
	now := millis(s.now())
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, q := range []string{
			`DELETE FROM batches WHERE expires_at <= ?`,
			`DELETE FROM idempotency WHERE expires_at <= ?`,
			`DELETE FROM address_quota WHERE expires_at <= ?`,
			`DELETE FROM uploads WHERE expires_at <= ?`,
			`DELETE FROM result_cache WHERE expires_at <= ?`,
			qSweepOutcomes,
			qSweepRows,
			qSweepOutcomeDomains,
			qSweepMarks,
		} {
			k, err := changed(tx.ExecContext(ctx, q, now))
			if err != nil {
				return dbErr("sweep", err)
			}
			n += k
		}
		return nil
	})
	s.memo.forget()
	if err == nil && s.quota != nil {
		s.quota.sweep(time.UnixMilli(now))
	}
	if err == nil {
		var k int
		k, err = s.sweepExports(now)
		n += int64(k)
	}
	if err == nil && s.keys != nil {
		// Sweeps run one at a time, so rebuilds never overlap.
		err = errors.Join(s.keys.rebuild(ctx, s.rdb), s.outcomes.rebuild(ctx, s.rdb))
	}
	return int(n), err
}

// ListBatches returns a page of the account's live batches, newest first.
func (s *Store) ListBatches(ctx context.Context, accountID string, after evs.BatchPos, limit int) ([]evs.Batch, error) {
	created, id := int64(math.MaxInt64), ""
	if !after.IsZero() {
		created, id = millis(after.CreatedAt), after.ID
	}
	return s.queryBatches(ctx, "list batches", qList, accountID, created, id, millis(s.now()), limit)
}
