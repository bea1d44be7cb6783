package sqlitestore_test

import (
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestExports: an export is read back whole with its URL's token until
// evs.ExportTTL has passed on the store's clock, and never with another
// token or an ID that is not one; the sweep deletes expired exports and
// the files a crash left behind once they are old, and nothing else.
func TestExports(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// A minute behind: files written now are younger than the clock.
	clock := testkit.NewClock(time.Now().Add(-time.Minute))
	st, err := sqlitestore.Open(ctx, dir, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	csv := []byte("email,status\r\n'=1+1@x.example,unknown\n")
	link, expires, err := st.Export(ctx, "acct-a", "batch-1", "", "v1", "http://evs.test:8080", func(w io.Writer) error { _, err := w.Write(csv); return err })
	if err != nil {
		t.Fatal(err)
	}
	if !expires.Equal(clock.Now().Add(evs.ExportTTL)) {
		t.Errorf("expires %v, want %v after %v", expires, evs.ExportTTL, clock.Now())
	}
	u, err := url.Parse(link)
	if err != nil || u.Scheme+"://"+u.Host != "http://evs.test:8080" {
		t.Fatalf("link %q", link)
	}
	id, ok := strings.CutPrefix(u.Path, "/v1/exports/")
	token := u.Query().Get("token")
	if !ok || token == "" {
		t.Fatalf("link %q", link)
	}
	read := func(id, token string) ([]byte, error) {
		batchID, f, err := st.OpenExport(ctx, id, token)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if batchID != "batch-1" {
			t.Errorf("batch %q", batchID)
		}
		return io.ReadAll(f)
	}
	if got, err := read(id, token); err != nil || string(got) != string(csv) {
		t.Fatalf("read back: %q, %v", got, err)
	}
	for _, tc := range []struct{ name, id, token string }{
		{"wrong token", id, strings.Repeat("A", len(token))},
		{"no token", id, ""},
		{"unknown export", "00000000-0000-4000-8000-000000000000", token},
		{"a path", "../evs.db", token},
		{"upper-case ID", strings.ToUpper(id), token},
	} {
		if _, err := read(tc.id, tc.token); evs.ErrorCode(err) != evs.CodeNotFound {
			t.Errorf("%s: %v, want not_found", tc.name, err)
		}
	}

	// Files a crash left: old ones go with the sweep, fresh ones stay (an
	// export being written).
	exports := filepath.Join(dir, "exports")
	for _, name := range []string{"old.csv", ".tmp-old.json-1", "fresh.csv", ".tmp-fresh.csv-2"} {
		if err := os.WriteFile(filepath.Join(exports, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-2 * evs.ExportTTL)
	for _, name := range []string{"old.csv", ".tmp-old.json-1"} {
		if err := os.Chtimes(filepath.Join(exports, name), long, long); err != nil {
			t.Fatal(err)
		}
	}
	files := func() []string {
		es, err := os.ReadDir(exports)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		slices.Sort(names)
		return names
	}
	if _, err := st.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{".tmp-fresh.csv-2", "fresh.csv", id + ".csv", id + ".json"}
	slices.Sort(want)
	if got := files(); !slices.Equal(got, want) {
		t.Fatalf("after a sweep before the expiry: %v, want %v", got, want)
	}

	clock.Advance(evs.ExportTTL)
	if _, err := read(id, token); evs.ErrorCode(err) != evs.CodeNotFound {
		t.Fatalf("expired: %v, want not_found", err)
	}
	if _, err := st.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := files(); !slices.Equal(got, []string{".tmp-fresh.csv-2", "fresh.csv"}) {
		t.Fatalf("after the expiry's sweep: %v", got)
	}
}

// TestExportStreamed: an export is written as its writer writes it, in
// pieces, and a writer that fails part-way leaves no export behind and
// its own error to the caller.
func TestExportStreamed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	row := []byte("someone@example.com,deliverable,accepted_email\r\n")
	const rows = 100_000 // 4.8 MB, written 48 bytes at a time
	link, _, err := st.Export(ctx, "acct-a", "batch-1", "", "v1", "http://evs.test", func(w io.Writer) error {
		for range rows {
			if _, err := w.Write(row); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(link)
	_, f, err := st.OpenExport(ctx, strings.TrimPrefix(u.Path, "/v1/exports/"), u.Query().Get("token"))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil || fi.Size() != int64(rows*len(row)) {
		t.Fatalf("export of %d rows: %v bytes (%v), want %d", rows, fi.Size(), err, rows*len(row))
	}

	broken := errors.New("the results could not be read")
	_, _, err = st.Export(ctx, "acct-a", "batch-2", "", "v1", "http://evs.test", func(w io.Writer) error {
		_, _ = w.Write(row)
		return broken
	})
	if !errors.Is(err, broken) {
		t.Fatalf("a failing writer: %v, want its own error", err)
	}
	es, err := os.ReadDir(filepath.Join(dir, "exports"))
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 { // the first export's list and record only
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		t.Fatalf("files after a failed export: %v", names)
	}
}
