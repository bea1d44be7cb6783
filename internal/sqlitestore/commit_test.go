package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// TestConcurrentWritesFailAlone runs many writes at once, so they share
// commits, some of which must fail: each failure is its caller's alone, and
// every other write lands.
func TestConcurrentWritesFailAlone(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), func() time.Time { return t0 })
	const n = 200
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		dups int
	)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprint("acct-", i)
			if i%2 == 1 {
				id = "same" // all odd writers race for one id
			}
			err := s.CreateAccount(ctx, evs.Account{ID: id, Name: id, CreatedAt: t0})
			switch {
			case err == nil:
			case i%2 == 1 && evs.ErrorCode(err) == evs.CodeInvalidState:
				mu.Lock()
				dups++
				mu.Unlock()
			default:
				t.Errorf("CreateAccount %s: %v", id, err)
			}
		})
	}
	// Writes of several statements that fail half-way (the duplicate seq is
	// in the second INSERT, after the batch row) share those commits too:
	// their savepoint must undo the half that was written.
	for i := range 10 {
		wg.Go(func() {
			items := make([]evs.Item, itemsPerInsert+1)
			for j := range items {
				items[j] = evs.Item{Seq: j % itemsPerInsert, Email: "x@y.example", Domain: "y.example"}
			}
			b := evs.Batch{ID: fmt.Sprint("bad-", i), AccountID: "a", Mode: "quick", State: evs.StateQueued, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
			if err := s.CreateBatch(ctx, b, items); evs.ErrorCode(err) != evs.CodeInvalidRequest {
				t.Errorf("CreateBatch with a repeated seq: %v, want %s", err, evs.CodeInvalidRequest)
			}
		})
	}
	wg.Wait()
	var batches int
	if err := s.db.QueryRow(`SELECT count(*) FROM batches`).Scan(&batches); err != nil || batches != 0 {
		t.Errorf("%d batches left by failed creates (%v), want 0", batches, err)
	}
	if dups != n/2-1 {
		t.Errorf("%d writers of the same id were refused, want %d", dups, n/2-1)
	}
	got, err := s.CountAccounts(ctx)
	if err != nil || got != n/2+1 {
		t.Fatalf("CountAccounts = %d, %v; want %d", got, err, n/2+1)
	}
}

// TestCancelledWriteIsNotRun: a write whose context has ended before it
// starts is not run, and its caller hears so.
func TestCancelledWriteIsNotRun(t *testing.T) {
	s := openStore(t, t.TempDir(), func() time.Time { return t0 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.CreateAccount(ctx, evs.Account{ID: "a", Name: "a", CreatedAt: t0}); err == nil {
		t.Fatal("CreateAccount with an ended context succeeded")
	}
	if _, err := s.Account(context.Background(), "a"); evs.ErrorCode(err) != evs.CodeNotFound {
		t.Fatalf("Account after a cancelled create: %v, want %s", err, evs.CodeNotFound)
	}
}

// TestClosedStoreRefusesWrites: a write after Close fails instead of
// waiting forever for a committer that is gone.
func TestClosedStoreRefusesWrites(t *testing.T) {
	s := openStore(t, t.TempDir(), func() time.Time { return t0 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAccount(context.Background(), evs.Account{ID: "a", Name: "a", CreatedAt: t0}); err == nil {
		t.Fatal("CreateAccount on a closed store succeeded")
	}
}
