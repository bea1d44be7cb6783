package sqlitestore_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestBatchRowsExpire: rows past their expiry are not read, and the sweep
// deletes them (internal/store's contract test pins the rest of
// api.RowStore on both stores; on AWS an S3 lifecycle rule expires them).
func TestBatchRowsExpire(t *testing.T) {
	ctx := context.Background()
	clock := testkit.NewClock(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	st, err := sqlitestore.Open(ctx, t.TempDir(), clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	rows := []byte("1,Ann,a@x.example\n")
	if err := st.PutRows(ctx, "a", "b1", clock.Now().Add(time.Hour), bytes.NewReader(rows), int64(len(rows))); err != nil {
		t.Fatal(err)
	}
	if _, found, err := st.OpenRows(ctx, "a", "b1"); err != nil || !found {
		t.Fatalf("before expiry: found %v, %v", found, err)
	}
	clock.Advance(time.Hour)
	if _, found, err := st.OpenRows(ctx, "a", "b1"); err != nil || found {
		t.Fatalf("expired rows: found %v, %v", found, err)
	}
	if n, err := st.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v, want the one part", n, err)
	}
}
