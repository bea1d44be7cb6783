package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// The address quota's counters (api.AddressQuota), in address_quota, with
// the Idempotency-Key limit's under periods "idempotency-keys/<day>". A
// charge is one upsert that updates only within the limit (RETURNING no
// row otherwise), not synced: one lost to a power failure gives back a few
// addresses. The serving store decides from memory (quotamirror.go).

const (
	qChargeQuota = `INSERT INTO address_quota (account_id, period, used, expires_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (account_id, period) DO UPDATE SET used = used + excluded.used, expires_at = excluded.expires_at
		WHERE used + excluded.used <= ?
		RETURNING used`
	qRefundQuota = `UPDATE address_quota SET used = max(used - ?, 0) WHERE account_id = ? AND period = ?`
)

// ChargeAddresses adds n to the account's counter for period if it stays
// within limit; see api.AddressQuota.
func (s *Store) ChargeAddresses(ctx context.Context, accountID, period string, n, limit int, expires time.Time) (bool, error) {
	if n > limit {
		return false, nil // even an unused quota cannot take it
	}
	if s.quota != nil {
		return s.quota.charge(ctx, s, accountID, period, n, limit, expires)
	}
	charged := false
	err := s.writeOne(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		var used int
		err := s.row(ctx, tx, qChargeQuota, accountID, period, n, millis(expires), limit).Scan(&used)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return dbErr("charge the address quota", err)
		}
		charged = true
		return nil
	})
	return charged, err
}

// RefundAddresses takes n back off the account's counter for period.
func (s *Store) RefundAddresses(ctx context.Context, accountID, period string, n int) error {
	if s.quota != nil {
		s.quota.refund(s, accountID, period, n)
		return nil
	}
	return s.writeOne(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.exec(ctx, tx, qRefundQuota, n, accountID, period)
		return dbErr("refund the address quota", err)
	})
}

// Counters returns the account's counters whose period is in [from, to),
// by period; the serving store's figures in memory stand over the table's.
func (s *Store) Counters(ctx context.Context, accountID, from, to string) (map[string]int, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT period, used FROM address_quota WHERE account_id = ? AND period >= ? AND period < ?`, accountID, from, to)
	out := map[string]int{}
	err = eachRow(rows, err, "read the quota counters", func(rows *sql.Rows) error {
		var p string
		var n int
		err := rows.Scan(&p, &n)
		out[p] = n
		return dbErr("read the quota counters", err)
	})
	if err != nil {
		return nil, err
	}
	if s.quota != nil {
		s.quota.overlay(accountID, from, to, out)
	}
	return out, nil
}
