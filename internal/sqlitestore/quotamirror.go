package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"
)

// quotaMirror holds address_quota's counters in memory for a store that
// is its directory's only server (OpenServing): no other process charges
// them, so the figure in memory is the truth and a charge is decided
// without waiting for a commit. With an Idempotency-Key on every call
// that wait was a second group commit per call (BenchmarkServeVerifyConcurrent
// unique-key: about 12% of the calls a second, more under the load
// harness). The change is then written in the background through the
// committer, as the charge itself was: not synced, since a charge lost to
// a crash only gives an account back a few units.
type quotaMirror struct {
	mu sync.Mutex
	m  map[quotaKey]mirrored
	// closing is set by close: no background write starts after it.
	closing bool
	// writes are the background writes in flight; close waits for them.
	writes sync.WaitGroup
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
	q.persist(s, "charge the address quota", qAddQuota, accountID, period, n, millis(expires))
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
	q.persist(s, "refund the address quota", qAddQuota, accountID, period, -taken, millis(c.expires))
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

// persist writes a change in the background; q.mu is held, so it is
// counted before close waits, or not started at all. The writes may land
// in any order, so each adds the change made in memory (a refund adds a
// negative one): however they are ordered, the row ends at the figure in
// memory.
func (q *quotaMirror) persist(s *Store, op, query string, args ...any) {
	if q.closing {
		return
	}
	q.writes.Add(1)
	go func() {
		defer q.writes.Done()
		_ = s.writeOne(context.Background(), false, func(ctx context.Context, tx *sql.Tx) error {
			_, err := s.exec(ctx, tx, query, args...)
			return dbErr(op, err)
		})
	}()
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

// close waits for the background writes, and starts no more.
func (q *quotaMirror) close() {
	q.mu.Lock()
	q.closing = true
	q.mu.Unlock()
	q.writes.Wait()
}
