package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"math"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// finalStates is the SQL list of final batch states.
const finalStates = `('completed', 'cancelled', 'failed')`

// createDelivery writes the delivery row of a batch with a callback URL, in
// the transaction that creates the batch.
func createDelivery(ctx context.Context, tx *sql.Tx, b evs.Batch) error {
	if b.CallbackURL == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO deliveries (batch_id, account_id, url, state) VALUES (?, ?, ?, ?)`,
		b.ID, b.AccountID, b.CallbackURL, evs.CallbackPending)
	return dbErr("create delivery", err)
}

const deliveryCols = `d.account_id, d.batch_id, d.url, d.state, d.attempts, d.last_status, d.next_at`

func scanDelivery(row scanner) (evs.Delivery, error) {
	var (
		d    evs.Delivery
		next int64
	)
	if err := row.Scan(&d.AccountID, &d.BatchID, &d.URL, &d.State, &d.Attempts, &d.LastStatus, &next); err != nil {
		return evs.Delivery{}, err
	}
	d.NextAt = fromMillis(next)
	return d, nil
}

// qDelivery reads a delivery for every final batch's GET, so it is
// prepared at Open.
const qDelivery = `SELECT ` + deliveryCols + `
		FROM deliveries d JOIN batches b ON b.id = d.batch_id
		WHERE d.batch_id = ? AND d.account_id = ? AND b.state IN ` + finalStates + ` AND b.expires_at > ?`

// Delivery returns the delivery of a live, final batch of account.
func (s *Store) Delivery(ctx context.Context, accountID, batchID string) (evs.Delivery, error) {
	d, err := scanDelivery(s.rstmt(qDelivery).QueryRowContext(ctx, batchID, accountID, millis(s.now())))
	return d, rowErr(err, "read delivery", store.NoDelivery)
}

// ClaimDelivery starts the next attempt of a due delivery; see store.Webhooks.
func (s *Store) ClaimDelivery(ctx context.Context, accountID, batchID string, attempts int, now, leaseUntil time.Time) (evs.Delivery, error) {
	defer s.touched(accountID, batchID)
	var out evs.Delivery
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		d, err := scanDelivery(tx.QueryRowContext(ctx, `UPDATE deliveries AS d SET attempts = attempts + 1, next_at = ?
			WHERE d.batch_id = ? AND d.account_id = ? AND d.state = ? AND d.attempts = ? AND d.next_at <= ?
			AND EXISTS (SELECT 1 FROM batches b WHERE b.id = d.batch_id AND b.state IN `+finalStates+`)
			RETURNING account_id, batch_id, url, state, attempts, last_status, next_at`,
			millis(leaseUntil), batchID, accountID, evs.CallbackPending, attempts, millis(now)))
		out = d
		return rowErr(err, "claim delivery", store.DeliveryNotDue)
	})
	return out, err
}

// RecordDelivery stores an attempt's outcome if it is still the latest.
func (s *Store) RecordDelivery(ctx context.Context, d evs.Delivery) error {
	defer s.touched(d.AccountID, d.BatchID)
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE deliveries SET state = ?, last_status = ?, next_at = ?
			WHERE batch_id = ? AND account_id = ? AND attempts = ? AND state = ?`,
			d.State, d.LastStatus, millis(d.NextAt), d.BatchID, d.AccountID, d.Attempts, evs.CallbackPending)
		if err != nil {
			return dbErr("record delivery", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return store.DeliveryMovedOn()
		}
		return nil
	})
}

// DueDeliveries lists pending deliveries of final, live batches due at now;
// see store.DueDeliveries. perAccount <= 0 bounds nothing per account.
func (s *Store) DueDeliveries(ctx context.Context, now time.Time, perAccount, limit int) ([]evs.Delivery, error) {
	perAccount = cmp.Or(max(perAccount, 0), math.MaxInt32)
	// rn numbers each account's due deliveries, earliest first; ordering
	// by it makes the accounts take turns within the limit.
	rows, err := s.rdb.QueryContext(ctx, `SELECT account_id, batch_id, url, state, attempts, last_status, next_at FROM (
			SELECT `+deliveryCols+`,
				ROW_NUMBER() OVER (PARTITION BY d.account_id ORDER BY d.next_at, d.batch_id) AS rn
			FROM deliveries d JOIN batches b ON b.id = d.batch_id
			WHERE d.state = ? AND d.next_at <= ? AND b.state IN `+finalStates+` AND b.expires_at > ?)
		WHERE rn <= ? ORDER BY rn, next_at, batch_id LIMIT ?`,
		evs.CallbackPending, millis(now), millis(s.now()), perAccount, max(limit, 0))
	return collect(rows, err, "list due deliveries", scanDelivery)
}

// The webhook_secrets row keeps the retired secrets in its "previous"
// column as a JSON array of evs.RetiredSecret (newest first), and the
// latest rotation in rotated_at. A row written before retired secrets were
// kept as a list holds one plain secret there, retired at rotated_at.

// WebhookSecret returns the account's signing secret.
func (s *Store) WebhookSecret(ctx context.Context, accountID string) (evs.WebhookSecret, error) {
	w := evs.WebhookSecret{AccountID: accountID}
	var (
		prev    string
		rotated sql.NullInt64
	)
	err := s.rdb.QueryRowContext(ctx, `SELECT current, previous, rotated_at FROM webhook_secrets WHERE account_id = ?`, accountID).
		Scan(&w.Current, &prev, &rotated)
	if err != nil {
		return evs.WebhookSecret{}, rowErr(err, "read webhook secret", store.NoWebhookSecret)
	}
	w.Retired, err = store.DecodeRetired(prev, prev, fromNullMillis(rotated))
	return w, err
}

// PutWebhookSecret stores w if the current secret is still ifCurrent. The
// check and the write are one immediate transaction, so of two concurrent
// rotations from the same secret exactly one is stored.
func (s *Store) PutWebhookSecret(ctx context.Context, w evs.WebhookSecret, ifCurrent string) error {
	prev, err := store.EncodeRetired(w.Retired)
	if err != nil {
		return err
	}
	rotated := sql.NullInt64{}
	if len(w.Retired) > 0 {
		rotated = nullMillis(w.Retired[0].RetiredAt)
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var cur string
		err := tx.QueryRowContext(ctx, `SELECT current FROM webhook_secrets WHERE account_id = ?`, w.AccountID).Scan(&cur)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return dbErr("read webhook secret", err)
		}
		if cur != ifCurrent {
			return store.SecretChanged()
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO webhook_secrets (account_id, current, previous, rotated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (account_id) DO UPDATE SET current = excluded.current, previous = excluded.previous, rotated_at = excluded.rotated_at`,
			w.AccountID, w.Current, prev, rotated)
		return dbErr("write webhook secret", err)
	})
}
