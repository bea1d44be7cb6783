package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// TestDuplicateNamesOfOldDatabases: a database written before names were
// unique may hold two accounts of one name. It still opens (no migration
// depends on the names being unique), the oldest is the one the name
// reads, and no third account of that name can be made.
func TestDuplicateNamesOfOldDatabases(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := openStore(t, dir, func() time.Time { return t0 })
	for i, id := range []string{"acct-new", "acct-old"} {
		// Written as the old CreateAccount did, without the name check.
		if _, err := s.db.ExecContext(ctx, qCreateAccount, id, "alice", false, false, millis(t0.Add(time.Duration(1-i)*time.Hour))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, func() time.Time { return t0 })
	a, err := s.AccountByName(ctx, "alice")
	if err != nil || a.ID != "acct-old" {
		t.Fatalf("AccountByName = %+v, %v; want the oldest, acct-old", a, err)
	}
	err = s.CreateAccount(ctx, evs.Account{ID: "acct-third", Name: "alice", CreatedAt: t0})
	if evs.ErrorCode(err) != evs.CodeInvalidState {
		t.Fatalf("CreateAccount of a third alice: %v, want invalid_state", err)
	}
	if n, err := s.CountAccounts(ctx); err != nil || n != 2 {
		t.Fatalf("CountAccounts = %d, %v; want 2", n, err)
	}
}
