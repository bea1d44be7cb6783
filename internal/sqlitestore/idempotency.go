package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/store"
)

const (
	// qClaim writes a new in-progress record, or takes over one that is
	// expired or a stale claim (RETURNING a row only then).
	qClaim = `INSERT INTO idempotency (scope, fingerprint, state, locked_until, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)
		ON CONFLICT (scope) DO UPDATE SET fingerprint = excluded.fingerprint, state = excluded.state,
			locked_until = excluded.locked_until, expires_at = excluded.expires_at,
			status_code = 0, headers = NULL, body = NULL
		WHERE idempotency.expires_at <= ?6 OR (idempotency.state = ?3 AND idempotency.locked_until <= ?6)
		RETURNING 1`
	qReadClaim = `SELECT scope, fingerprint, state, locked_until, expires_at, status_code, headers, body FROM idempotency WHERE scope = ?`
	qComplete  = `UPDATE idempotency SET state = ?, status_code = ?, headers = ?, body = ? WHERE scope = ? AND state = ?`
	qRelease   = `DELETE FROM idempotency WHERE scope = ?`

	// qLookup reads the live record of scope ?1 at ?2: not expired, not a
	// stale claim (state ?3).
	qLookup = `SELECT scope, fingerprint, state, locked_until, expires_at, status_code, headers, body FROM idempotency
		WHERE scope = ?1 AND expires_at > ?2 AND (state <> ?3 OR locked_until > ?2)`
	// qPut writes a finished record, or replaces one that is expired or a
	// stale claim at ?9; no row changed means a live record was left alone
	// (rows affected, not RETURNING: an exec is measurably cheaper on the
	// committer, which runs one per call).
	qPut = `INSERT INTO idempotency (scope, fingerprint, state, locked_until, expires_at, status_code, headers, body)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
		ON CONFLICT (scope) DO UPDATE SET fingerprint = excluded.fingerprint, state = excluded.state,
			locked_until = excluded.locked_until, expires_at = excluded.expires_at,
			status_code = excluded.status_code, headers = excluded.headers, body = excluded.body
		WHERE idempotency.expires_at <= ?9 OR (idempotency.state = ?10 AND idempotency.locked_until <= ?9)`
)

var _ idempotency.LocalStore = (*Store)(nil)

// ErrLiveRecord is PutIdempotency's answer when the scope already has a
// live record (never under the serve lock: the one local Keeper puts a
// scope only while holding its claim).
var ErrLiveRecord = errors.New("sqlitestore: a live idempotency record exists")

// ClaimIdempotency writes rec as an in-progress record unless a live record
// of its scope exists, which it returns instead; of concurrent claims, also
// across processes, exactly one wins. (The fallback without the serve
// lock; evs serve uses LookupIdempotency and PutIdempotency.)
//
// The claim is not synced on its own: only mutual exclusion depends on it.
// A reply is never run again thanks to CompleteIdempotency, which is
// synced; a claim lost to power failure belonged to a reply never sent.
func (s *Store) ClaimIdempotency(ctx context.Context, rec idempotency.Record, now time.Time) (idempotency.Record, bool, error) {
	var (
		existing idempotency.Record
		claimed  bool
	)
	err := s.writeOne(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		err := s.row(ctx, tx, qClaim, rec.Scope, rec.Fingerprint, idempotency.InProgress,
			millis(rec.LockedUntil), millis(rec.ExpiresAt), millis(now)).Scan(&one)
		switch {
		case err == nil:
			claimed = true
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return dbErr("write idempotency record", err)
		}
		existing, err = scanRecord(s.row(ctx, tx, qReadClaim, rec.Scope))
		return dbErr("read idempotency record", err)
	})
	if err != nil {
		return idempotency.Record{}, false, err
	}
	if claimed {
		s.markKey(rec.Scope)
	}
	return existing, claimed, nil
}

func scanRecord(row scanner) (idempotency.Record, error) {
	var (
		rec                    idempotency.Record
		lockedUntil, expiresAt int64
		headers                sql.NullString
	)
	err := row.Scan(&rec.Scope, &rec.Fingerprint, &rec.State, &lockedUntil, &expiresAt, &rec.StatusCode, &headers, &rec.Body)
	if err != nil {
		return idempotency.Record{}, err
	}
	rec.LockedUntil, rec.ExpiresAt = fromMillis(lockedUntil), fromMillis(expiresAt)
	if headers.Valid {
		if err := json.Unmarshal([]byte(headers.String), &rec.Headers); err != nil {
			return idempotency.Record{}, fmt.Errorf("decode stored reply headers: %w", err)
		}
	}
	return rec, nil
}

// encodeReply is the stored form of a reply's headers and body: headers as
// a JSON object (NULL for none), body never NULL.
func encodeReply(headers map[string]string, body []byte) (sql.NullString, []byte, error) {
	var h sql.NullString
	if headers != nil {
		b, err := json.Marshal(headers)
		if err != nil {
			return h, nil, fmt.Errorf("sqlitestore: encode reply headers: %w", err)
		}
		h = sql.NullString{String: string(b), Valid: true}
	}
	if body == nil {
		body = []byte{}
	}
	return h, body, nil
}

// LookupIdempotency returns the live record of scope at now
// (idempotency.LocalStore), on the reader pool, so it never queues behind
// the committer. Most lookups of a new key read nothing (keyFilter).
func (s *Store) LookupIdempotency(ctx context.Context, scope string, now time.Time) (idempotency.Record, bool, error) {
	if s.keys != nil && !s.keys.mayHave(scope) {
		if s.closed.Load() {
			return idempotency.Record{}, false, errClosed
		}
		return idempotency.Record{}, false, nil
	}
	rec, err := scanRecord(s.rstmt(qLookup).QueryRowContext(ctx, scope, millis(now), idempotency.InProgress))
	if errors.Is(err, sql.ErrNoRows) {
		return idempotency.Record{}, false, nil
	}
	if err != nil {
		return idempotency.Record{}, false, dbErr("look up idempotency record", err)
	}
	return rec, true, nil
}

// PutIdempotency stores rec, a finished record, replacing an expired or
// stale one of its scope; a live record makes it fail with ErrLiveRecord.
// It returns once its group is committed, so a reply a client received
// survives kill -9 and is replayed, never run again.
//
// The commit is not synced on its own: a power loss can lose the records
// since the last synced write, whose keys then run again. Not syncing lets
// keyed calls keep up with plain ones; the work itself is still synced.
func (s *Store) PutIdempotency(ctx context.Context, rec idempotency.Record, now time.Time) error {
	if rec.State != idempotency.Done {
		// An in-progress record written alone would block its key until
		// LockTimeout after a crash: the local mode never writes one.
		return fmt.Errorf("sqlitestore: put idempotency record in state %q, want %q", rec.State, idempotency.Done)
	}
	h, body, err := encodeReply(rec.Headers, rec.Body)
	if err != nil {
		return err
	}
	// Patient: one of the many alike that keyed calls make at once.
	err = s.c.do(ctx, &op{oneStatement: true, patient: true, fn: func(ctx context.Context, tx *sql.Tx) error {
		if n, err := changed(s.exec(ctx, tx, qPut, rec.Scope, rec.Fingerprint, rec.State, millis(rec.LockedUntil), millis(rec.ExpiresAt),
			rec.StatusCode, h, body, millis(now), idempotency.InProgress)); err != nil {
			return dbErr("put idempotency record", err)
		} else if n == 0 {
			return ErrLiveRecord
		}
		return nil
	}})
	if err == nil {
		s.markKey(rec.Scope)
	}
	return err
}

func (s *Store) markKey(scope string) {
	if s.keys != nil {
		s.keys.add(scope)
	}
}

// CompleteIdempotency stores the reply on the in-progress record of scope
// and marks it done; without such a record it is CodeNotFound. It returns
// once the reply is synced to disk: the caller sends it only then.
func (s *Store) CompleteIdempotency(ctx context.Context, scope string, statusCode int, headers map[string]string, body []byte) error {
	h, body, err := encodeReply(headers, body)
	if err != nil {
		return err
	}
	return s.writeOne(ctx, true, func(ctx context.Context, tx *sql.Tx) error {
		if n, err := changed(s.exec(ctx, tx, qComplete, idempotency.Done, statusCode, h, body, scope, idempotency.InProgress)); err != nil {
			return dbErr("complete idempotency record", err)
		} else if n == 0 {
			return store.NoClaim()
		}
		return nil
	})
}

// ReleaseIdempotency deletes the record of scope; a missing one is no error.
// Like a claim it is not synced: lost to power failure, the claim blocks
// its key until idempotency.LockTimeout, as a crash mid-call does.
func (s *Store) ReleaseIdempotency(ctx context.Context, scope string) error {
	return s.writeOne(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.exec(ctx, tx, qRelease, scope)
		return dbErr("release idempotency record", err)
	})
}
