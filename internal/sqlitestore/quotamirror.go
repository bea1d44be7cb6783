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

// persist writes a change in the background, under q.mu (so close waits
// for it). Each write adds its change, so in whatever order they land the
// row ends at the figure in memory.
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
