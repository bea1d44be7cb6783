package sqlitestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
)

// BenchmarkPutResults writes 1000 results per call, the batch runner's
// flush size, into 50,000-item batches.
func BenchmarkPutResults(b *testing.B) {
	const perCall, items = 1000, 50_000
	ctx := context.Background()
	s := openStore(b, b.TempDir(), func() time.Time { return t0 })
	batches, next := 0, items
	id := ""
	b.ResetTimer()
	for b.Loop() {
		if next == items {
			b.StopTimer()
			batches++
			id = fmt.Sprint("b", batches)
			newBatch(b, s, id, items, t0.Add(time.Hour))
			next = 0
			b.StartTimer()
		}
		if _, err := s.PutResults(ctx, "a", id, resultsFor(next, next+perCall), t0); err != nil {
			b.Fatal(err)
		}
		next += perCall
	}
	b.ReportMetric(float64(b.N*perCall)/b.Elapsed().Seconds(), "results/s")
}

// BenchmarkPutResults50k writes a whole 50,000-address batch's results in
// one call: the test-mode case, where every verdict is ready at once.
func BenchmarkPutResults50k(b *testing.B) {
	const items = 50_000
	ctx := context.Background()
	s := openStore(b, b.TempDir(), func() time.Time { return t0 })
	rs := resultsFor(0, items)
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		id := fmt.Sprint("b", i)
		newBatch(b, s, id, items, t0.Add(time.Hour))
		b.StartTimer()
		got, err := s.PutResults(ctx, "a", id, rs, t0)
		if err != nil {
			b.Fatal(err)
		}
		if got.State != evs.StateCompleted {
			b.Fatalf("batch %s after all results: %s", id, got.State)
		}
	}
}

// BenchmarkCreateBatch50k stores a batch of the largest size the API takes.
func BenchmarkCreateBatch50k(b *testing.B) {
	const n = 50_000
	ctx := context.Background()
	s := openStore(b, b.TempDir(), func() time.Time { return t0 })
	items := make([]evs.Item, n)
	for i := range items {
		items[i] = evs.Item{Seq: i, Email: fmt.Sprintf("user.%d@d%d.example", i, i%50), Domain: fmt.Sprintf("d%d.example", i%50)}
	}
	i := 0
	for b.Loop() {
		i++
		batch := evs.Batch{ID: fmt.Sprint("b", i), AccountID: "a", Mode: "quick", State: evs.StateQueued,
			CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), Counters: evs.Counters{Total: n}}
		if err := s.CreateBatch(ctx, batch, items); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIdempotentCalls runs the store's side of idempotent calls for
// unique keys from 64 goroutines, as concurrent API calls with
// Idempotency-Key do. shared is claim + complete (two writes through the
// committer: the Lambda's pattern, here on SQLite); local is lookup + put
// (a read on the reader pool and one write through the committer: evs
// serve's, whose claims are in memory).
func BenchmarkIdempotentCalls(b *testing.B) {
	headers := map[string]string{"Content-Type": "application/json"}
	body := []byte(`{"status":"deliverable"}`)
	local := func(ctx context.Context, s *Store, scope string, now time.Time) error {
		if _, found, err := s.LookupIdempotency(ctx, scope, now); err != nil || found {
			return fmt.Errorf("lookup: %v %w", found, err)
		}
		return s.PutIdempotency(ctx, idempotency.Record{Scope: scope, Fingerprint: "f", State: idempotency.Done,
			LockedUntil: now, ExpiresAt: now.Add(time.Hour), StatusCode: 200, Headers: headers, Body: body}, now)
	}
	calls := []struct {
		name    string
		serving bool
		call    func(ctx context.Context, s *Store, scope string, now time.Time) error
	}{
		{"shared", false, func(ctx context.Context, s *Store, scope string, now time.Time) error {
			_, claimed, err := s.ClaimIdempotency(ctx, idempotency.Record{Scope: scope, Fingerprint: "f", State: idempotency.InProgress,
				LockedUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}, now)
			if err != nil || !claimed {
				return fmt.Errorf("claim: %v %w", claimed, err)
			}
			return s.CompleteIdempotency(ctx, scope, 200, headers, body)
		}},
		{"local", true, local},
	}
	for _, c := range calls {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			open := Open
			if c.serving {
				open = OpenServing
			}
			s, err := open(ctx, b.TempDir(), time.Now)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var n atomic.Int64
			b.SetParallelism(32) // × GOMAXPROCS goroutines
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					scope := fmt.Sprint("a\x00POST /v1/verify\x00k-", n.Add(1))
					if err := c.call(ctx, s, scope, time.Now()); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}

// BenchmarkQuickCheck50k is the start-up check of the database
// (quickCheck, PRAGMA quick_check) on a store holding one batch of 50,000
// addresses with every result, on a fresh reader connection each time (as
// at start), the file in the operating system's cache.
func BenchmarkQuickCheck50k(b *testing.B) {
	const items = 50_000
	ctx := context.Background()
	dir := b.TempDir()
	s := openStore(b, dir, func() time.Time { return t0 })
	newBatch(b, s, "b1", items, t0.Add(time.Hour))
	if _, err := s.PutResults(ctx, "a", "b1", resultsFor(0, items), t0); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	s.Close()
	s = openStore(b, dir, func() time.Time { return t0 })
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		s.rdb.SetMaxIdleConns(0) // the next query opens a new connection, cold page cache
		s.rdb.SetMaxIdleConns(readers())
		b.StartTimer()
		if err := quickCheck(ctx, s.rdb, path); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(fi.Size())/(1<<20), "dbMiB")
}

// BenchmarkStorageBytes measures what the per-account storage limits
// bound (docs/security.md): the bytes a batch takes per address with its
// result (50,000 addresses, full-mode decisions), and the bytes one
// Idempotency-Key's record takes with a /v1/verify reply (670 bytes, a
// real test-mode reply without its request id) under a UUID key. Each is
// the growth of the database file, write-ahead log folded in.
func BenchmarkStorageBytes(b *testing.B) {
	const addresses, records = 50_000, 20_000
	ctx := context.Background()
	body := []byte(`{"status":"deliverable","decision":{"email":"accepted_email@x.example","normalized":"accepted_email@x.example","reason":"accepted_email","mode":"quick","suggestion":null,"flags":{"disposable":false,"role":false,"free":false,"acceptAll":false,"smtputf8":false},"checks":{"syntax":{"valid":true},"dns":{"result":"ok","mx":["mx.sandbox.invalid"],"implicitMx":false,"rcode":"NOERROR"},"smtp":{"result":"accepted","host":"mx.sandbox.invalid","provider":"other","code":250,"enhancedCode":"2.1.5","message":"OK (test mode)","tls":true,"detail":"test mode: simulated probe result (quick mode never probes)"}},"checkedAt":"2026-11-22T10:00:00.000Z","durationMs":0,"testMode":true}}`)
	size := func(dir string) int64 {
		fi, err := os.Stat(filepath.Join(dir, FileName))
		if err != nil {
			b.Fatal(err)
		}
		return fi.Size()
	}
	// grow opens a fresh store, runs fill, closes it (folding the log
	// in) and returns the file's growth.
	grow := func(fill func(s *Store)) int64 {
		dir := b.TempDir()
		s, err := Open(ctx, dir, func() time.Time { return t0 })
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
		before := size(dir)
		s, err = Open(ctx, dir, func() time.Time { return t0 })
		if err != nil {
			b.Fatal(err)
		}
		fill(s)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		return size(dir) - before
	}
	var perAddress, perRecord float64
	for b.Loop() {
		perAddress = float64(grow(func(s *Store) {
			newBatch(b, s, "b1", addresses, t0.Add(time.Hour))
			if _, err := s.PutResults(ctx, "a", "b1", resultsFor(0, addresses), t0); err != nil {
				b.Fatal(err)
			}
		})) / addresses
		perRecord = float64(grow(func(s *Store) {
			for i := range records {
				rec := idempotency.Record{Scope: idempotency.Scope("9f0c1c9e-3f4d-4c55-8f1a-6f2d1f0b7a11", "POST", "/v1/verify", fmt.Sprintf("3b241101-e2bb-4255-8caf-%012d", i)),
					Fingerprint: "f9a3c2e1d0b7a6958473625140f9e8d7c6b5a4938271605f4e3d2c1b0a99887", State: idempotency.Done,
					LockedUntil: t0, ExpiresAt: t0.Add(idempotency.Retention), StatusCode: 200, Headers: map[string]string{"Content-Type": "application/json"}, Body: body}
				if err := s.PutIdempotency(ctx, rec, t0); err != nil {
					b.Fatal(err)
				}
			}
		})) / records
	}
	b.ReportMetric(perAddress, "B/address")
	b.ReportMetric(perRecord, "B/record")
}

// BenchmarkListBatches reads pages of 100 of one account's 5,000 batches
// (among 10,000 of two accounts, 1% expired), from the start and from a
// cursor deep in the list; BenchmarkBatchByID, in the same run, reads one
// batch by its ID, the floor a page's per-batch cost is measured against.
func BenchmarkListBatches(b *testing.B) {
	s := listingStore(b)
	ctx := context.Background()
	deep := evs.BatchPos{CreatedAt: t0.Add(1000 * time.Second), ID: fmt.Sprintf("b-%05d", 1000)}
	for _, c := range []struct {
		name  string
		after evs.BatchPos
	}{{"first", evs.BatchPos{}}, {"deep", deep}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				page, err := s.ListBatches(ctx, "a", c.after, 100)
				if err != nil || len(page) != 100 {
					b.Fatalf("ListBatches: %d, %v", len(page), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/batch")
		})
	}
	b.Run("BatchByID", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Batch(ctx, "a", "b-02500"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/batch")
	})
}

// listingStore holds 5,000 batches of account a and 5,000 of account z,
// one second apart, every hundredth expired.
func listingStore(b *testing.B) *Store {
	b.Helper()
	s := openStore(b, b.TempDir(), func() time.Time { return t0.Add(3 * time.Hour) })
	item := []evs.Item{{Seq: 0, Email: "u@d.example", Domain: "d.example"}}
	for i := range 10_000 {
		acct, n := "a", i/2
		if i%2 == 1 {
			acct = "z"
		}
		exp := t0.Add(24 * time.Hour)
		if n%100 == 7 {
			exp = t0.Add(time.Hour)
		}
		bt := evs.Batch{ID: fmt.Sprintf("b-%05d", n), AccountID: acct, Mode: "quick", State: evs.StateCompleted,
			CreatedAt: t0.Add(time.Duration(n) * time.Second), CompletedAt: t0.Add(time.Duration(n) * time.Second), ExpiresAt: exp,
			Counters: evs.Counters{Total: 1, Processed: 1, Deliverable: 1}}
		if acct == "z" {
			bt.ID = fmt.Sprintf("z-%05d", n)
		}
		if err := s.CreateBatch(context.Background(), bt, item); err != nil {
			b.Fatal(err)
		}
	}
	return s
}
