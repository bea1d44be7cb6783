package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// The result cache: one row per account, normalised address and mode,
// holding the decision and when it stops being reused. A batch keeps its
// request's maxAge in batches.max_age (milliseconds; 0 none, -1 reuse
// nothing).

const resultCacheSchema = `
ALTER TABLE batches ADD COLUMN max_age INTEGER NOT NULL DEFAULT 0;
CREATE TABLE result_cache (
	account_id TEXT NOT NULL,
	address    TEXT NOT NULL,
	mode       TEXT NOT NULL,
	decision   BLOB NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (account_id, address, mode)
) WITHOUT ROWID;
CREATE INDEX result_cache_expires ON result_cache (expires_at);
`

const (
	qCachedDecision = `SELECT decision, expires_at FROM result_cache WHERE account_id = ? AND address = ? AND mode = ?`
	qKeepDecision   = `INSERT INTO result_cache (account_id, address, mode, decision, expires_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (account_id, address, mode) DO UPDATE SET decision = excluded.decision, expires_at = excluded.expires_at`
)

// CachedDecision returns the account's cached decision for the normalised
// address in mode and when it expires, expired or not: the caller tells a
// stale entry from a miss.
func (s *Store) CachedDecision(ctx context.Context, accountID string, mode evs.Mode, address string) (d evs.Decision, expires time.Time, found bool, err error) {
	var (
		blob []byte
		at   int64
	)
	err = s.rstmt(qCachedDecision).QueryRowContext(ctx, accountID, address, string(mode)).Scan(&blob, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return evs.Decision{}, time.Time{}, false, nil
	}
	if err != nil {
		return evs.Decision{}, time.Time{}, false, dbErr("read the result cache", err)
	}
	if d, err = store.DecodeDecision(address, blob); err != nil {
		return evs.Decision{}, time.Time{}, false, err
	}
	return d, time.UnixMilli(at), true, nil
}

// KeepDecisions writes entries to the account's cache, replacing what it
// held for the same address and mode. The write is not synced on its own:
// an entry lost to a power failure only costs a probe again.
func (s *Store) KeepDecisions(ctx context.Context, accountID string, entries []store.CacheEntry) error {
	if len(entries) == 0 {
		return nil
	}
	buf := make([]byte, 0, 128)
	return s.c.do(ctx, &op{fn: func(ctx context.Context, tx *sql.Tx) error {
		st, err := s.wstmt(ctx, tx, qKeepDecision)
		if err != nil {
			return dbErr("write the result cache", err)
		}
		for _, e := range entries {
			buf = store.AppendCached(buf[:0], e.Decision)
			if _, err := st.ExecContext(ctx, accountID, e.Decision.Normalized, string(e.Decision.Mode), buf, millis(e.ExpiresAt)); err != nil {
				return dbErr("write the result cache", err)
			}
		}
		return nil
	}})
}
