package sqlitestore

import (
	"context"
	"database/sql"
)

// qProbeWrite rewrites the write probe's one row: a real write of a page
// through the committer, as small as a write can be.
const qProbeWrite = `INSERT INTO write_probe (id, at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at = excluded.at`

// ProbeWrite tells whether the database takes writes now: it commits one
// tiny write through the same committer as every other write, so a full
// disk, a lock held too long or a closed store fail it as they would fail
// a call (CodeUnavailable for what may pass). The readiness check of
// `evs serve` (/readyz) calls it; a read (Ping) cannot see a full disk.
// It does not wait for a sync: readiness asks whether writes are taken,
// and a probe per check must stay cheap.
func (s *Store) ProbeWrite(ctx context.Context) error {
	if s.closed.Load() {
		return dbErr("probe write", errClosed)
	}
	return s.writeOne(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, qProbeWrite, millis(s.now()))
		return dbErr("probe write", err)
	})
}
