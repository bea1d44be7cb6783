package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// reportedAccounts is the set of accounts with outcomes stored, kept by
// the directory's only server (OpenServing), so that a verdict for an
// account that never reported an outcome — most of them — reads nothing
// for its history. An account joins before its first outcome is written;
// it leaves only when the store is reopened: outcomes deleted or expired
// since cost a query, never a missed outcome.
type reportedAccounts struct {
	mu  sync.RWMutex
	ids map[string]bool
}

// newReportedAccounts reads the accounts with outcomes: one index seek
// per account, not a scan of the outcomes.
func newReportedAccounts(ctx context.Context, db *sql.DB) (*reportedAccounts, error) {
	r := &reportedAccounts{ids: map[string]bool{}}
	for last := ""; ; {
		var id string
		err := db.QueryRowContext(ctx, `SELECT account_id FROM outcomes WHERE account_id > ? ORDER BY account_id LIMIT 1`, last).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return r, nil
		}
		if err != nil {
			return nil, dbErr("read accounts with outcomes", err)
		}
		r.ids[id], last = true, id
	}
}

// has tells whether the account may have outcomes (true without a set:
// another process may write them).
func (r *reportedAccounts) has(accountID string) bool {
	if r == nil {
		return true
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.ids[accountID]
}

// any tells whether any account may have outcomes.
func (r *reportedAccounts) any() bool {
	if r == nil {
		return true
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.ids) > 0
}

// add records that the account is about to have outcomes.
func (r *reportedAccounts) add(accountID string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.ids[accountID] = true
	r.mu.Unlock()
}
