package sqlitestore

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// qBatchView reads a live batch and, when it is final, its delivery, in one
// statement rather than two.
var qBatchView = `SELECT d.url, d.state, d.attempts, d.last_status, d.next_at, ` + qualified("b.", batchCols) + `
	FROM batches b LEFT JOIN deliveries d ON d.batch_id = b.id AND d.account_id = b.account_id AND b.state IN ` + finalStates + `
	WHERE b.id = ? AND b.account_id = ? AND b.expires_at > ?`

// qualified prefixes each column of the list cols with table.
func qualified(table, cols string) string {
	fields := strings.Split(cols, ",")
	for i, f := range fields {
		fields[i] = table + strings.TrimSpace(f)
	}
	return strings.Join(fields, ", ")
}

// BatchView returns what Batch and Delivery return together: the batch id
// of account (CodeNotFound also once expired) and, if the batch is final
// and has a webhook delivery, that delivery (ok true).
func (s *Store) BatchView(ctx context.Context, accountID, id string) (evs.Batch, evs.Delivery, bool, error) {
	now := s.now()
	var (
		k    viewKey
		read uint64
	)
	if s.views != nil {
		k = viewKey{accountID, id}
		if v, ok := s.views.get(k, now); ok {
			return v.b, v.d, v.found, nil
		}
		read = s.views.begin()
	}
	b, d, found, err := s.batchView(ctx, accountID, id, now)
	if err == nil && s.views != nil {
		s.views.put(k, batchView{b, d, found}, read)
	}
	return b, d, found, err
}

func (s *Store) batchView(ctx context.Context, accountID, id string, now time.Time) (evs.Batch, evs.Delivery, bool, error) {
	var (
		url, state       sql.NullString
		attempts, status sql.NullInt64
		next             sql.NullInt64
	)
	b, err := scanBatch(s.rstmt(qBatchView).QueryRowContext(ctx, id, accountID, millis(now)),
		&url, &state, &attempts, &status, &next)
	if err != nil {
		return evs.Batch{}, evs.Delivery{}, false, rowErr(err, "read batch", store.NoBatch)
	}
	if !url.Valid {
		return b, evs.Delivery{}, false, nil
	}
	return b, evs.Delivery{
		AccountID: b.AccountID, BatchID: b.ID, URL: url.String, State: evs.CallbackState(state.String),
		Attempts: int(attempts.Int64), LastStatus: int(status.Int64), NextAt: fromMillis(next.Int64),
	}, true, nil
}
