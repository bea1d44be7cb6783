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

const (
	// qClaim writes a new in-progress record, or takes over one that is
	// expired or a stale claim; RETURNING names the row only when it did.
	// A live record is left alone and read by qReadClaim.
	qClaim = `INSERT INTO idempotency (scope, fingerprint, state, locked_until, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)
		ON CONFLICT (scope) DO UPDATE SET fingerprint = excluded.fingerprint, state = excluded.state,
			locked_until = excluded.locked_until, expires_at = excluded.expires_at,
			status_code = 0, headers = NULL, body = NULL
		WHERE idempotency.expires_at <= ?6 OR (idempotency.state = ?3 AND idempotency.locked_until <= ?6)
		RETURNING 1`
	qReadClaim = `SELECT scope, fingerprint, state, locked_until, expires_at, status_code, headers, body FROM idempotency WHERE scope = ?`
	qComplete  = `UPDATE idempotency SET state = ?, status_code = ?, headers = ?, body = ? WHERE scope = ? AND state = ?`
	qRelease   = `DELETE FROM idempotency WHERE scope = ?`
)

// ClaimIdempotency writes rec as an in-progress record unless a live record
// of its scope exists, which it returns instead. Read and write share one
// immediate transaction, so of concurrent claims exactly one wins, also
// across processes.
//
// The claim survives kill -9 but is not synced to disk on its own: only
// mutual exclusion depends on it, and that holds at once for every process.
// The promise that a reply the client received is never executed again
// rests on CompleteIdempotency, which is synced, and whose sync also makes
// every earlier claim in the log durable. A claim lost to power failure
// belonged to a call whose reply was never stored, so never sent.
func (s *Store) ClaimIdempotency(ctx context.Context, rec idempotency.Record, now time.Time) (idempotency.Record, bool, error) {
	var (
		existing idempotency.Record
		claimed  bool
	)
	err := s.writeOne(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		claim, err := s.wstmt(ctx, tx, qClaim)
		if err != nil {
			return dbErr("write idempotency record", err)
		}
		var one int
		err = claim.QueryRowContext(ctx, rec.Scope, rec.Fingerprint, idempotency.InProgress,
			millis(rec.LockedUntil), millis(rec.ExpiresAt), millis(now)).Scan(&one)
		switch {
		case err == nil:
			claimed = true
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return dbErr("write idempotency record", err)
		}
		read, err := s.wstmt(ctx, tx, qReadClaim)
		if err != nil {
			return dbErr("read idempotency record", err)
		}
		var (
			lockedUntil, expiresAt int64
			headers                sql.NullString
		)
		err = read.QueryRowContext(ctx, rec.Scope).Scan(&existing.Scope, &existing.Fingerprint, &existing.State,
			&lockedUntil, &expiresAt, &existing.StatusCode, &headers, &existing.Body)
		if err != nil {
			return dbErr("read idempotency record", err)
		}
		existing.LockedUntil, existing.ExpiresAt = fromMillis(lockedUntil), fromMillis(expiresAt)
		if headers.Valid {
			if err := json.Unmarshal([]byte(headers.String), &existing.Headers); err != nil {
				return fmt.Errorf("sqlitestore: decode stored reply headers: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return idempotency.Record{}, false, err
	}
	return existing, claimed, nil
}

// CompleteIdempotency stores the reply on the in-progress record of scope
// and marks it done; without such a record it is CodeNotFound. It returns
// once the reply is synced to disk: the caller sends it only then.
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
	return s.writeOne(ctx, true, func(ctx context.Context, tx *sql.Tx) error {
		st, err := s.wstmt(ctx, tx, qComplete)
		if err != nil {
			return dbErr("complete idempotency record", err)
		}
		res, err := st.ExecContext(ctx, idempotency.Done, statusCode, h, body, scope, idempotency.InProgress)
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
// Like a claim it is not synced on its own: should power fail before the
// next synced write, the claim comes back and blocks its key until
// idempotency.LockTimeout, as a crash mid-call does.
func (s *Store) ReleaseIdempotency(ctx context.Context, scope string) error {
	return s.writeOne(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		st, err := s.wstmt(ctx, tx, qRelease)
		if err != nil {
			return dbErr("release idempotency record", err)
		}
		_, err = st.ExecContext(ctx, scope)
		return dbErr("release idempotency record", err)
	})
}
