package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
)

// ClaimIdempotency writes rec as an in-progress record unless a live record
// of its scope exists, which it returns instead. Read and write share one
// immediate transaction, so of concurrent claims exactly one wins, also
// across processes.
func (s *Store) ClaimIdempotency(ctx context.Context, rec idempotency.Record, now time.Time) (idempotency.Record, bool, error) {
	var (
		existing idempotency.Record
		claimed  bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		var (
			cur                    idempotency.Record
			lockedUntil, expiresAt int64
			headers                sql.NullString
		)
		err := tx.QueryRowContext(ctx,
			`SELECT scope, fingerprint, state, locked_until, expires_at, status_code, headers, body FROM idempotency WHERE scope = ?`,
			rec.Scope).Scan(&cur.Scope, &cur.Fingerprint, &cur.State, &lockedUntil, &expiresAt, &cur.StatusCode, &headers, &cur.Body)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return dbErr("read idempotency record", err)
		default:
			cur.LockedUntil, cur.ExpiresAt = fromMillis(lockedUntil), fromMillis(expiresAt)
			expired := expiresAt <= millis(now)
			stale := cur.State == idempotency.InProgress && lockedUntil <= millis(now)
			if !expired && !stale {
				if headers.Valid {
					if err := json.Unmarshal([]byte(headers.String), &cur.Headers); err != nil {
						return fmt.Errorf("sqlitestore: decode stored reply headers: %w", err)
					}
				}
				existing = cur
				return nil
			}
		}
		_, err = tx.ExecContext(ctx,
			`INSERT OR REPLACE INTO idempotency (scope, fingerprint, state, locked_until, expires_at) VALUES (?, ?, ?, ?, ?)`,
			rec.Scope, rec.Fingerprint, idempotency.InProgress, millis(rec.LockedUntil), millis(rec.ExpiresAt))
		if err != nil {
			return dbErr("write idempotency record", err)
		}
		claimed = true
		return nil
	})
	if err != nil {
		return idempotency.Record{}, false, err
	}
	return existing, claimed, nil
}

// CompleteIdempotency stores the reply on the in-progress record of scope
// and marks it done; without such a record it is CodeNotFound.
func (s *Store) CompleteIdempotency(ctx context.Context, scope string, statusCode int, headers map[string]string, body []byte) error {
	var h sql.NullString
	if headers != nil {
		b, err := json.Marshal(headers)
		if err != nil {
			return fmt.Errorf("sqlitestore: encode reply headers: %w", err)
		}
		h = sql.NullString{String: string(b), Valid: true}
	}
	if body == nil {
		body = []byte{}
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`UPDATE idempotency SET state = ?, status_code = ?, headers = ?, body = ? WHERE scope = ? AND state = ?`,
			idempotency.Done, statusCode, h, body, scope, idempotency.InProgress)
		if err != nil {
			return dbErr("complete idempotency record", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return dbErr("complete idempotency record", err)
		} else if n == 0 {
			return evs.Errorf(evs.CodeNotFound, "No idempotency record in progress.")
		}
		return nil
	})
}

// ReleaseIdempotency deletes the record of scope; a missing one is no error.
func (s *Store) ReleaseIdempotency(ctx context.Context, scope string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM idempotency WHERE scope = ?`, scope)
		return dbErr("release idempotency record", err)
	})
}
