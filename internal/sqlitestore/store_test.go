package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/testkit"
)

var t0 = time.Date(2026, 11, 22, 10, 4, 5, 123_000_000, time.UTC)

func openStore(t testing.TB, dir string, now func() time.Time) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir, now)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOpenSettings(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "nested")
	s := openStore(t, dir, time.Now)
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		t.Fatalf("database file: %v", err)
	}
	// The writer is one connection; every reader of the pool must carry its
	// settings too, so ask several readers at once.
	ctx := context.Background()
	type pooled struct {
		name string
		c    *sql.Conn
		want map[string]string
	}
	var conns []pooled
	w, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	conns = append(conns, pooled{"writer", w, map[string]string{
		"synchronous":  "2", // FULL
		"foreign_keys": "1",
		"query_only":   "0",
	}})
	for i := range 3 {
		c, err := s.rdb.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, pooled{fmt.Sprint("reader ", i), c, map[string]string{"query_only": "1"}})
	}
	for _, c := range conns {
		c.want["journal_mode"] = "wal"
		c.want["busy_timeout"] = fmt.Sprint(busyTimeout.Milliseconds())
		c.want["user_version"] = fmt.Sprint(len(migrations))
		for pragma, want := range c.want {
			var got string
			if err := c.c.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
				t.Fatalf("%s: PRAGMA %s: %v", c.name, pragma, err)
			}
			if got != want {
				t.Errorf("%s: PRAGMA %s = %s, want %s", c.name, pragma, got, want)
			}
		}
	}
	// A reader refuses to write, so no write can bypass the committer.
	if _, err := conns[1].c.ExecContext(ctx, `DELETE FROM accounts`); err == nil {
		t.Error("a reader connection wrote")
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAccount(ctx, evs.Account{ID: "a1", Name: "alice", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, time.Now)
	if _, err := s.Account(ctx, "a1"); err != nil {
		t.Fatalf("account after reopen: %v", err)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, time.Now)
	if _, err := s.db.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(migrations)+1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s2, err := Open(ctx, dir, time.Now); err == nil {
		s2.Close()
		t.Fatal("Open of a database with a newer schema: no error")
	}
}

func TestTimesAreUTC(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), time.Now)
	created := time.Date(2026, 3, 1, 23, 30, 0, 7_000_000, time.FixedZone("X", -5*3600))
	if err := s.CreateAccount(ctx, evs.Account{ID: "a1", Name: "alice", CreatedAt: created}); err != nil {
		t.Fatal(err)
	}
	a, err := s.Account(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if a.CreatedAt.Location() != time.UTC || !a.CreatedAt.Equal(created) {
		t.Errorf("CreatedAt = %v (%v), want %v in UTC", a.CreatedAt, a.CreatedAt.Location(), created)
	}
}

// newBatch stores a running batch of n items for account a.
func newBatch(t testing.TB, s *Store, id string, n int, expires time.Time) evs.Batch {
	t.Helper()
	b := evs.Batch{ID: id, AccountID: "a", Mode: "quick", State: evs.StateRunning, CreatedAt: t0, ExpiresAt: expires,
		Counters: evs.Counters{Total: n}}
	items := make([]evs.Item, n)
	for i := range items {
		items[i] = evs.Item{Seq: i, Email: fmt.Sprintf("u%d@d%d.example", i, i%50), Domain: fmt.Sprintf("d%d.example", i%50)}
	}
	if err := s.CreateBatch(context.Background(), b, items); err != nil {
		t.Fatalf("CreateBatch: %v", err)
	}
	return b
}

// decision is a realistic full-mode decision.
var decision = evs.Decision{
	Email: "u1@d1.example", Normalized: "u1@d1.example", Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeFull,
	Checks: evs.Checks{
		Syntax: evs.SyntaxCheck{Valid: true},
		DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{"mx1.d1.example", "mx2.d1.example"}, Rcode: "NOERROR"},
		SMTP: evs.SMTPCheck{Result: evs.SMTPAccepted, Host: "mx1.d1.example", Code: 250, EnhancedCode: "2.1.5",
			Message: "2.1.5 Recipient OK", TLS: true},
	},
	CheckedAt: evs.Time{Time: time.Date(2026, 11, 22, 10, 4, 5, 123e6, time.UTC)}, DurationMs: 182,
}

func resultsFor(from, to int) []evs.Result {
	rs := make([]evs.Result, 0, to-from)
	for i := from; i < to; i++ {
		rs = append(rs, evs.Result{Seq: i, Email: fmt.Sprintf("u%d@d%d.example", i, i%50), Decision: decision})
	}
	return rs
}

func TestCreateBatchIsAtomic(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), func() time.Time { return t0 })
	b := evs.Batch{ID: "b1", AccountID: "a", Mode: "quick", State: evs.StateQueued, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	// The duplicate seq is in the second INSERT chunk, after the batch row
	// and the first chunk were written.
	items := make([]evs.Item, itemsPerInsert+10)
	for i := range items {
		items[i] = evs.Item{Seq: i, Email: "x@y.example", Domain: "y.example"}
	}
	items[len(items)-1].Seq = 3
	err := s.CreateBatch(ctx, b, items)
	if evs.ErrorCode(err) != evs.CodeInvalidRequest {
		t.Fatalf("CreateBatch with a repeated seq: %v, want %s", err, evs.CodeInvalidRequest)
	}
	if _, err := s.Batch(ctx, "a", "b1"); evs.ErrorCode(err) != evs.CodeNotFound {
		t.Fatalf("Batch after the failed CreateBatch: %v, want not found", err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM items`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("items after the failed CreateBatch: %d (%v), want 0", n, err)
	}

	newBatch(t, s, "b2", 3, t0.Add(time.Hour))
	err = s.CreateBatch(ctx, evs.Batch{ID: "b2", AccountID: "a", State: evs.StateQueued, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, nil)
	if evs.ErrorCode(err) != evs.CodeInvalidState {
		t.Fatalf("CreateBatch of an existing id: %v, want %s", err, evs.CodeInvalidState)
	}
}

func TestPutResultsRefusesBadResults(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), func() time.Time { return t0 })
	newBatch(t, s, "b1", 3, t0.Add(time.Hour))
	for _, c := range []struct {
		name string
		bad  evs.Result
	}{
		{"unknown seq", evs.Result{Seq: 3, Decision: decision}},
		{"negative seq", evs.Result{Seq: -1, Decision: decision}},
		{"unknown reason", evs.Result{Seq: 2, Decision: evs.Decision{Reason: "great"}}},
		{"no reason", evs.Result{Seq: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A good result in the same call is not written either.
			_, err := s.PutResults(ctx, "a", "b1", append(resultsFor(0, 1), c.bad), t0)
			if evs.ErrorCode(err) != evs.CodeInvalidRequest {
				t.Fatalf("PutResults: %v, want %s", err, evs.CodeInvalidRequest)
			}
			b, err := s.Batch(ctx, "a", "b1")
			if err != nil {
				t.Fatal(err)
			}
			if b.Counters.Processed != 0 {
				t.Errorf("processed = %d after a refused PutResults", b.Counters.Processed)
			}
			rs, err := s.Results(ctx, "a", "b1", -1, 10, "")
			if err != nil || len(rs) != 0 {
				t.Errorf("Results after a refused PutResults = %v, %v; want none", rs, err)
			}
		})
	}
}

func TestCompletedNeedsEveryResult(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), func() time.Time { return t0 })
	newBatch(t, s, "b1", 3, t0.Add(time.Hour))
	if _, err := s.PutResults(ctx, "a", "b1", resultsFor(0, 2), t0); err != nil {
		t.Fatal(err)
	}
	_, err := s.TransitionBatch(ctx, "a", "b1", []evs.State{evs.StateRunning}, evs.StateCompleted, "", t0)
	if evs.ErrorCode(err) != evs.CodeInvalidState {
		t.Fatalf("TransitionBatch to completed with a result missing: %v, want %s", err, evs.CodeInvalidState)
	}
	if b, err := s.Batch(ctx, "a", "b1"); err != nil || b.State != evs.StateRunning {
		t.Fatalf("batch after the refused transition: %+v, %v", b, err)
	}
}

func TestSweep(t *testing.T) {
	ctx := context.Background()
	clk := testkit.NewClock(t0)
	s := openStore(t, t.TempDir(), clk.Now)
	newBatch(t, s, "old", 100, t0.Add(time.Hour))
	newBatch(t, s, "new", 10, t0.Add(3*time.Hour))
	for _, id := range []string{"old", "new"} {
		if _, err := s.PutResults(ctx, "a", id, resultsFor(0, 5), t0); err != nil {
			t.Fatal(err)
		}
	}
	for i, exp := range []time.Duration{time.Hour, 2 * time.Hour, 3 * time.Hour} {
		rec := idempotency.Record{Scope: fmt.Sprint("scope-", i), Fingerprint: "f", LockedUntil: t0.Add(time.Minute), ExpiresAt: t0.Add(exp)}
		if _, _, err := s.ClaimIdempotency(ctx, rec, t0); err != nil {
			t.Fatal(err)
		}
	}
	count := func(table string) int {
		t.Helper()
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	for _, c := range []struct {
		at                             time.Duration
		swept                          int
		batches, items, results, idems int
	}{
		{0, 0, 2, 110, 10, 3},
		{time.Hour - time.Millisecond, 0, 2, 110, 10, 3},
		{time.Hour, 2, 1, 10, 5, 2}, // batch "old" and scope-0
		{2 * time.Hour, 1, 1, 10, 5, 1},
		{2 * time.Hour, 0, 1, 10, 5, 1},
		{4 * time.Hour, 2, 0, 0, 0, 0},
	} {
		clk.Set(t0.Add(c.at))
		n, err := s.Sweep(ctx)
		if err != nil {
			t.Fatalf("Sweep at +%v: %v", c.at, err)
		}
		got := []int{n, count("batches"), count("items"), count("results"), count("idempotency")}
		want := []int{c.swept, c.batches, c.items, c.results, c.idems}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Sweep at +%v: swept, batches, items, results, idempotency = %v, want %v", c.at, got, want)
		}
	}
}

func TestBusyIsUnavailable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	holder := openStore(t, dir, time.Now)
	s, err := open(ctx, dir, time.Now, 50*time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// Another process holds the write lock longer than s waits.
	tx, err := holder.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, name, test, suspended, created_at) VALUES ('h', 'h', 0, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	err = s.CreateAccount(ctx, evs.Account{ID: "a1", Name: "alice", CreatedAt: t0})
	if evs.ErrorCode(err) != evs.CodeUnavailable {
		t.Fatalf("CreateAccount while another process writes: %v, want %s", err, evs.CodeUnavailable)
	}
	// Reads go on meanwhile (WAL).
	if n, err := s.CountAccounts(ctx); err != nil || n != 0 {
		t.Fatalf("CountAccounts while another process writes = %d, %v; want 0, nil", n, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAccount(ctx, evs.Account{ID: "a1", Name: "alice", CreatedAt: t0}); err != nil {
		t.Fatalf("CreateAccount after the lock is gone: %v", err)
	}
}

// TestTwoHandles is `evs keys create` running while `evs serve` works on the
// same directory: each handle writes while the other writes and reads, and
// sees the other's writes.
func TestTwoHandles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	serve := openStore(t, dir, func() time.Time { return t0 })
	cli := openStore(t, dir, func() time.Time { return t0 })
	if err := serve.CreateAccount(ctx, evs.Account{ID: "a", Name: "owner", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	newBatch(t, serve, "b1", n, t0.Add(time.Hour))

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	wg.Go(func() {
		for i := 0; i < n; i += 10 {
			if _, err := serve.PutResults(ctx, "a", "b1", resultsFor(i, i+10), t0); err != nil {
				errs <- fmt.Errorf("serve PutResults: %w", err)
				return
			}
		}
	})
	wg.Go(func() {
		for i := range n / 4 {
			h := fmt.Sprintf("%012x%052d", i, 0)
			if err := cli.CreateKey(ctx, evs.Key{ID: h[:12], Hash: h, AccountID: "a", CreatedAt: t0.Add(time.Duration(i))}); err != nil {
				errs <- fmt.Errorf("cli CreateKey: %w", err)
				return
			}
			// The serving side sees the key as soon as it is acknowledged.
			if _, err := serve.KeyByHash(ctx, h); err != nil {
				errs <- fmt.Errorf("serve KeyByHash of a new key: %w", err)
				return
			}
			// and the CLI side reads the batch as it runs.
			b, err := cli.Batch(ctx, "a", "b1")
			if err != nil {
				errs <- fmt.Errorf("cli Batch: %w", err)
				return
			}
			if c := b.Counters; c.Processed != c.Deliverable || c.Processed > n {
				errs <- fmt.Errorf("cli sees counters %+v", c)
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	keys, err := serve.ListKeys(ctx)
	if err != nil || len(keys) != n/4 {
		t.Fatalf("serve ListKeys = %d keys, %v; want %d", len(keys), err, n/4)
	}
	b, err := cli.Batch(ctx, "a", "b1")
	if err != nil || b.State != evs.StateCompleted || b.Counters.Processed != n {
		t.Fatalf("cli Batch = %+v, %v; want completed with %d processed", b, err, n)
	}
}

func TestCompleteNeedsAClaim(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), func() time.Time { return t0 })
	err := s.CompleteIdempotency(ctx, "nobody", 200, nil, nil)
	if evs.ErrorCode(err) != evs.CodeNotFound {
		t.Fatalf("CompleteIdempotency without a claim: %v, want %s", err, evs.CodeNotFound)
	}
	rec := idempotency.Record{Scope: "s", Fingerprint: "f", LockedUntil: t0.Add(time.Minute), ExpiresAt: t0.Add(time.Hour)}
	if _, _, err := s.ClaimIdempotency(ctx, rec, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.CompleteIdempotency(ctx, "s", 200, nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	// A done record is not completed again with another reply.
	err = s.CompleteIdempotency(ctx, "s", 500, nil, []byte("y"))
	if evs.ErrorCode(err) != evs.CodeNotFound {
		t.Fatalf("second CompleteIdempotency: %v, want %s", err, evs.CodeNotFound)
	}
	got, _, err := s.ClaimIdempotency(ctx, rec, t0)
	if err != nil || got.StatusCode != 200 || string(got.Body) != "x" {
		t.Fatalf("record after a second complete = %+v, %v; want the first reply", got, err)
	}
	if err := s.ReleaseIdempotency(ctx, "nobody"); err != nil {
		t.Fatalf("ReleaseIdempotency of a missing record: %v", err)
	}
}
