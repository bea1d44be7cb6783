package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"io"
	"time"
)

// The rows of a batch made from a CSV list (api.RowStore) are kept in
// parts of uploadPart bytes, as uploads are. They are written before their
// batch, so they carry their account and expiry rather than refer to it.

// rowsSchema is the migration that adds batch rows.
const rowsSchema = `
CREATE TABLE batch_rows (
	batch_id   TEXT NOT NULL,
	n          INTEGER NOT NULL,
	account_id TEXT NOT NULL,
	expires_at INTEGER NOT NULL,
	data       BLOB NOT NULL,
	PRIMARY KEY (batch_id, n)
);
CREATE INDEX batch_rows_expires ON batch_rows (expires_at);
`

// qSweepRows deletes expired rows (Sweep).
const qSweepRows = `DELETE FROM batch_rows WHERE expires_at <= ?`

// PutRows stores rows, size bytes, as batch batchID's, until expires.
// Rows stored before under the same batch (a retried creation) are
// replaced.
func (s *Store) PutRows(ctx context.Context, accountID, batchID string, expires time.Time, rows io.Reader, _ int64) error {
	err := s.writeOne(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM batch_rows WHERE batch_id = ?`, batchID)
		return dbErr("replace batch rows", err)
	})
	if err != nil {
		return err
	}
	_, rerr, err := eachPart(rows, func(n int, part []byte, _ int64) error {
		return s.writeOne(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO batch_rows (batch_id, n, account_id, expires_at, data) VALUES (?, ?, ?, ?, ?)`,
				batchID, n, accountID, millis(expires), part)
			return dbErr("store batch rows", err)
		})
	})
	return cmp.Or(err, rerr)
}

// OpenRows returns the rows of the account's batch, read a part at a
// time; found is false when it has none.
func (s *Store) OpenRows(ctx context.Context, accountID, batchID string) (io.ReadCloser, bool, error) {
	r := &partReader{part: func(n int) (data []byte, err error) {
		err = s.rdb.QueryRowContext(ctx, `SELECT data FROM batch_rows WHERE batch_id = ? AND n = ? AND account_id = ? AND expires_at > ?`,
			batchID, n, accountID, millis(s.now())).Scan(&data)
		return data, dbErr("read batch rows", err)
	}}
	if err := r.fill(); err != nil {
		return nil, false, err
	}
	if r.done {
		return nil, false, nil
	}
	return r, true, nil
}
