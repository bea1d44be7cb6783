package dynamostore_test

import (
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
)

// BenchmarkPutResults writes 1000 results in one call (the batch runner's
// flush size: eleven transactions) into a fresh 1,000-item batch on fresh
// tables. The figures measure moto, a single Python process that deep-copies
// the tables a transaction touches, far more than the store: they only
// compare versions of this code on one machine, not DynamoDB's speed.
func BenchmarkPutResults(b *testing.B) {
	const n = 1000
	ctx := context.Background()
	c := testkit.DynamoDB(b)
	rs := resultsOf(0, n)
	for b.Loop() {
		b.StopTimer()
		tables := newTables(b, c)
		st := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(b), Tables: tables, Now: clock})
		newBatch(b, st, "b1", n, 0)
		b.StartTimer()
		got, err := st.PutResults(ctx, "acct", "b1", rs, t0)
		if err != nil {
			b.Fatal(err)
		}
		if got.State != evs.StateCompleted || got.Counters.Processed != n {
			b.Fatalf("after %d results: %+v", n, got)
		}
		b.StopTimer()
		dropTables(c, tables)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "results/s")
}

// BenchmarkPutResultsRedelivered repeats a call of 1000 results that were
// all written before, into a batch one item short of complete: the cost of
// a redelivered SQS message (eleven cancelled transactions, each dropping
// its already-written results). On moto a cancelled transaction also
// deep-copies and restores the tables, so this is slower there than the
// first write.
func BenchmarkPutResultsRedelivered(b *testing.B) {
	ctx := context.Background()
	st := newStore(b, clock)
	newBatch(b, st, "b1", 1001, 0)
	rs := resultsOf(0, 1000)
	if _, err := st.PutResults(ctx, "acct", "b1", rs, t0); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		got, err := st.PutResults(ctx, "acct", "b1", rs, t0)
		if err != nil {
			b.Fatal(err)
		}
		if got.Counters.Processed != 1000 {
			b.Fatalf("redelivery counted again: processed %d", got.Counters.Processed)
		}
	}
}

// BenchmarkCreateBatch stores a 5,000-item batch (200 BatchWriteItem calls,
// eight at a time) on fresh tables, also moto-bound.
func BenchmarkCreateBatch(b *testing.B) {
	const n = 5000
	ctx := context.Background()
	c := testkit.DynamoDB(b)
	items := itemsOf(n)
	for b.Loop() {
		b.StopTimer()
		tables := newTables(b, c)
		st := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(b), Tables: tables, Now: clock})
		batch := evs.Batch{ID: "b1", AccountID: "acct", Mode: "quick", State: evs.StateQueued,
			CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), Counters: evs.Counters{Total: n}}
		b.StartTimer()
		if err := st.CreateBatch(ctx, batch, items); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		dropTables(c, tables)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "items/s")
}
