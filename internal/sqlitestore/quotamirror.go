package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"
)

// quotaMirror holds address_quota's counters in memory for the directory's
// only server (OpenServing), so a charge is decided without waiting for a
// commit (about 12% of the calls a second with an Idempotency-Key on each,
// BenchmarkServeVerifyConcurrent). The change is written in the
// background, not synced: one lost to a crash gives back a few units.
type quotaMirror struct {
	mu sync.Mutex
	m  map[quotaKey]mirrored
	// unwritten is each counter's change in memory not yet handed to a
	// write. One writer at a time takes all of it: the charges made while
	// a write commits go in the next one, so a counter charged on every
	// call costs the committer one statement a group, not one a call.
	unwritten map[quotaKey]mirrored
	// writing says the writer runs; closing, set by close, that no
	// writer starts after it.
	writing, closing bool
	// writer is the writer in flight; close waits for it.
	writer sync.WaitGroup
}

type quotaKey struct{ account, period string }

type mirrored struct {
	used    int
	expires time.Time
}

const (
	qQuotaUsed = `SELECT used, expires_at FROM address_quota WHERE account_id = ? AND period = ?`
	qAddQuota  = `INSERT INTO address_quota (account_id, period, used, expires_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (account_id, period) DO UPDATE SET used = used + excluded.used, expires_at = excluded.expires_at`
)

// charge is ChargeAddresses from memory; a counter not in memory yet is
// read from the table first.
func (q *quotaMirror) charge(ctx context.Context, s *Store, accountID, period string, n, limit int, expires time.Time) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := quotaKey{accountID, period}
	c, ok := q.m[k]
	if !ok {
		var exp int64
		err := s.rdb.QueryRowContext(ctx, qQuotaUsed, accountID, period).Scan(&c.used, &exp)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return false, dbErr("read the address quota", err)
		}
		c.expires = time.UnixMilli(exp)
	}
	if c.used+n > limit {
		q.m[k] = c
		return false, nil
	}
	c.used += n
	c.expires = expires
	q.m[k] = c
	q.persist(s, k, n, expires)
	return true, nil
}

// refund is RefundAddresses in memory and, in the background, the table.
func (q *quotaMirror) refund(s *Store, accountID, period string, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := quotaKey{accountID, period}
	c, ok := q.m[k]
	if !ok || c.used == 0 {
		return // nothing charged here to give back
	}
	taken := min(n, c.used)
	c.used -= taken
	q.m[k] = c
	q.persist(s, k, -taken, c.expires)
}

// overlay puts the account's counters in memory with a period in
// [from, to) over those read from the table.
func (q *quotaMirror) overlay(accountID, from, to string, m map[string]int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, c := range q.m {
		if k.account == accountID && k.period >= from && k.period < to {
			m[k.period] = c.used
		}
	}
}

// persist adds a change (a refund's is negative) to what the writer puts
// in the table next, and starts the writer if it is idle; q.mu is held.
// Each write adds the changes made in memory since the last, so the row
// ends at the figure in memory.
func (q *quotaMirror) persist(s *Store, k quotaKey, n int, expires time.Time) {
	if q.closing {
		return
	}
	if q.unwritten == nil {
		q.unwritten = make(map[quotaKey]mirrored)
	}
	u := q.unwritten[k]
	q.unwritten[k] = mirrored{used: u.used + n, expires: expires}
	if !q.writing {
		q.writing = true
		q.writer.Go(func() { q.write(s) })
	}
}

// write puts the unwritten changes in the table, one transaction at a
// time, until none is left. A failed write drops its changes: a charge
// lost, like one lost to a crash, only gives an account back a few units.
func (q *quotaMirror) write(s *Store) {
	for {
		q.mu.Lock()
		batch := q.unwritten
		q.unwritten = nil
		if len(batch) == 0 {
			q.writing = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		_ = s.c.do(context.Background(), &op{patient: true, fn: func(ctx context.Context, tx *sql.Tx) error {
			for k, c := range batch {
				if _, err := s.exec(ctx, tx, qAddQuota, k.account, k.period, c.used, millis(c.expires)); err != nil {
					return dbErr("write the address quota", err)
				}
			}
			return nil
		}})
	}
}

// sweep forgets the counters expired by now, as the sweep deletes their
// rows.
func (q *quotaMirror) sweep(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, c := range q.m {
		if !c.expires.After(now) {
			delete(q.m, k)
		}
	}
}

// close waits for the writer to put what is unwritten, and starts no
// more.
func (q *quotaMirror) close() {
	q.mu.Lock()
	q.closing = true
	q.mu.Unlock()
	q.writer.Wait()
}
