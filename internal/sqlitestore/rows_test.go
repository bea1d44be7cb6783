package sqlitestore_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestBatchRows: a batch's rows are read back whole, across parts, by
// their account only; a second put replaces the first; once expired they
// are not read, and the sweep deletes them.
func TestBatchRows(t *testing.T) {
	ctx := context.Background()
	clock := testkit.NewClock(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	st, err := sqlitestore.Open(ctx, t.TempDir(), clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	read := func(account, batch string) ([]byte, bool) {
		t.Helper()
		rc, found, err := st.OpenRows(ctx, account, batch)
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			return nil, false
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return b, true
	}
	if _, found := read("a", "b1"); found {
		t.Fatal("rows of a batch that has none")
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), (5<<20)/16+3) // five parts and a bit
	expires := clock.Now().Add(time.Hour)
	if err := st.PutRows(ctx, "a", "b1", expires, bytes.NewReader(big), int64(len(big))); err != nil {
		t.Fatal(err)
	}
	if got, found := read("a", "b1"); !found || !bytes.Equal(got, big) {
		t.Fatalf("read %d bytes (found %v), want %d", len(got), found, len(big))
	}
	if _, found := read("other", "b1"); found {
		t.Fatal("another account read the rows")
	}
	small := []byte("replaced")
	if err := st.PutRows(ctx, "a", "b1", expires, bytes.NewReader(small), int64(len(small))); err != nil {
		t.Fatal(err)
	}
	if got, _ := read("a", "b1"); !bytes.Equal(got, small) {
		t.Fatalf("after a second put: %d bytes, want %q", len(got), small)
	}
	clock.Advance(time.Hour)
	if _, found := read("a", "b1"); found {
		t.Fatal("expired rows were read")
	}
	if n, err := st.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v, want the one part", n, err)
	}
}
