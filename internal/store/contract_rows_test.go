package store_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
)

func TestRowsContract(t *testing.T) {
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) {
		runRowsContract(t, sqliteStore(t, time.Now))
	})
	t.Run("DynamoDB", func(t *testing.T) {
		runRowsContract(t, dynamoStore(t, time.Now))
	})
}

// runRowsContract pins api.RowStore: a batch's rows, put from a spool
// file as the API puts them, are read back whole (across SQLite's 1 MiB
// parts) by their account only; a batch without rows has none; a second
// put replaces the first.
func runRowsContract(t *testing.T, st api.RowStore) {
	ctx := context.Background()
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
	if _, found := read("acct-a", "b1"); found {
		t.Fatal("rows of a batch that has none")
	}
	rows := bytes.Repeat([]byte("1,2,,Ann,a@x.example\n"), (5<<20)/21+3) // five parts and a bit
	f, err := os.CreateTemp(t.TempDir(), "rows")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(rows); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Hour)
	if err := st.PutRows(ctx, "acct-a", "b1", expires, f, int64(len(rows))); err != nil {
		t.Fatal(err)
	}
	if got, found := read("acct-a", "b1"); !found || !bytes.Equal(got, rows) {
		t.Fatalf("read %d bytes (found %v), want %d", len(got), found, len(rows))
	}
	if _, found := read("acct-b", "b1"); found {
		t.Fatal("another account read the rows")
	}
	if err := st.PutRows(ctx, "acct-a", "b1", expires, bytes.NewReader([]byte("x")), 1); err != nil {
		t.Fatal(err)
	}
	if got, _ := read("acct-a", "b1"); string(got) != "x" {
		t.Fatalf("after a second put: %q", got)
	}
}
