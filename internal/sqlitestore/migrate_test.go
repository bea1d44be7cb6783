package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// TestMigrateFromVersion1 opens a data directory written by the first
// schema and finds its batches, items, results and counters intact.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	exp := millis(t0.Add(time.Hour))
	for _, q := range []string{
		migrations[0],
		`PRAGMA user_version = 1`,
		`INSERT INTO batches (id, account_id, mode, state, created_at, expires_at, items, total, duplicates, processed, deliverable, undeliverable)
			VALUES ('b1', 'a', 'quick', 'running', 0, ` + itoa(exp) + `, 3, 4, 1, 2, 1, 1),
			       ('b2', 'a', 'full', 'queued', 1, ` + itoa(exp) + `, 1, 1, 0, 0, 0, 0)`,
		`INSERT INTO items (batch_id, seq, email, domain) VALUES
			('b1', 0, 'a@x.example', 'x.example'), ('b1', 1, 'b@x.example', 'x.example'), ('b1', 2, 'c@y.example', 'y.example'),
			('b2', 0, 'd@z.example', 'z.example')`,
		// The JSON decision form of that schema's time.
		`INSERT INTO results (batch_id, seq, email, status, decision) VALUES
			('b1', 0, 'a@x.example', 'deliverable', '{"r":"accepted_email","m":"quick","b":32}'),
			('b1', 2, 'c@y.example', 'undeliverable', '{"r":"rejected_email","m":"quick","b":32}')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	db.Close()

	s := openStore(t, dir, func() time.Time { return t0 })
	b, err := s.Batch(ctx, "a", "b1")
	if err != nil {
		t.Fatal(err)
	}
	if c := b.Counters; b.State != evs.StateRunning || c.Total != 4 || c.Duplicates != 1 || c.Processed != 2 || c.Deliverable != 1 || c.Undeliverable != 1 {
		t.Fatalf("migrated batch = %+v", b)
	}
	rs, err := s.Results(ctx, "a", "b1", -1, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Seq != 0 || rs[0].Email != "a@x.example" || rs[0].Decision.Reason != evs.ReasonAcceptedEmail ||
		rs[1].Seq != 2 || rs[1].Email != "c@y.example" || rs[1].Decision.Reason != evs.ReasonRejectedEmail {
		t.Fatalf("migrated results = %+v", rs)
	}
	if rs, err := s.Results(ctx, "a", "b1", -1, 10, evs.Undeliverable); err != nil || len(rs) != 1 || rs[0].Seq != 2 {
		t.Fatalf("migrated undeliverable results = %+v, %v", rs, err)
	}
	items, _, err := s.InputItems(ctx, "a", "b1", 0, 10)
	if err != nil || len(items) != 3 {
		t.Fatalf("migrated items = %+v, %v", items, err)
	}
	pending, err := s.WithoutResults(ctx, "a", "b1", items)
	if err != nil || len(pending) != 1 || pending[0].Seq != 1 || pending[0].Email != "b@x.example" || pending[0].Domain != "x.example" {
		t.Fatalf("migrated pending items = %+v, %v", pending, err)
	}
	// The migrated batch keeps working: its last result completes it.
	b, err = s.PutResults(ctx, "a", "b1", resultsFor(1, 2), t0)
	if err != nil || b.State != evs.StateCompleted || b.Counters.Processed != 3 {
		t.Fatalf("PutResults on the migrated batch = %+v, %v", b, err)
	}
	if b, err := s.Batch(ctx, "a", "b2"); err != nil || b.Mode != evs.ModeFull {
		t.Fatalf("second migrated batch = %+v, %v", b, err)
	}
	// Deleting a batch still takes its items and results with it.
	s.now = func() time.Time { return t0.Add(2 * time.Hour) }
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"batches", "items", "results"} {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s after sweeping the migrated batches: %d rows, %v", table, n, err)
		}
	}
}

func itoa(n int64) string { return fmt.Sprint(n) }
