package dynamostore_test

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
)

// sweepOutcomes is how many reported outcomes the flatness test stores
// beside the batches: about 4 MB of items, so a Scan would take at least
// four pages where the empty table takes one. With 100,000 the counts were
// the same (measured once), but moto takes over two minutes to store them.
const sweepOutcomes = 20_000

// A sweep reads the index of active work, not the Batches table: with
// 20,000 outcomes and finished batches stored beside the active ones it
// makes the same reads, and finds the same work, as with none. Each sweep
// is that of a new process (a cold start), so its one-item check that the
// upgrade backfill is done is counted too.
func TestSweepReadsAreFlatInTheTableSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testkit.DynamoDB(t)
	tables := newTables(t, c)
	objects := testkit.S3(t)
	st := dynamostore.New(dynamostore.Config{Client: c, Objects: objects, Tables: tables, Now: clock})
	create := func(id string, state evs.State, callback string) {
		t.Helper()
		b := evs.Batch{ID: id, AccountID: "acct", Mode: "quick", State: state, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour),
			Counters: evs.Counters{Total: 1}, CallbackURL: callback}
		if state.Final() {
			b.CompletedAt = t0
		}
		if err := st.CreateBatch(ctx, b, itemsOf(1)); err != nil {
			t.Fatalf("CreateBatch %s: %v", id, err)
		}
	}
	create("queued", evs.StateQueued, "")
	create("queued-with-hook", evs.StateQueued, "https://hooks.example/x")
	create("failed-with-hook", evs.StateFailed, "https://hooks.example/y")
	create("finished", evs.StateQueued, "")
	if _, err := st.TransitionBatch(ctx, "acct", "finished", []evs.State{evs.StateQueued}, evs.StateCancelled, "", t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Sweep(ctx, t0); err != nil { // the first sweep of the stack
		t.Fatal(err)
	}

	type sweep struct {
		reads      map[string]int
		unfinished []string
		overdue    []string
	}
	measure := func() sweep {
		t.Helper()
		var mu sync.Mutex
		reads := map[string]int{}
		counted := testkit.DynamoDB(t, inject(hook{before: func(in any) error {
			op := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", in), "*dynamodb."), "Input")
			if op == "Scan" || op == "Query" || op == "GetItem" || op == "BatchGetItem" {
				mu.Lock()
				reads[op]++
				mu.Unlock()
			}
			return nil
		}}))
		fresh := dynamostore.New(dynamostore.Config{Client: counted, Objects: objects, Tables: tables, Now: clock})
		un, due, err := fresh.Sweep(ctx, t0)
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		s := sweep{reads: reads}
		for _, b := range un {
			s.unfinished = append(s.unfinished, b.ID)
		}
		for _, d := range due {
			s.overdue = append(s.overdue, d.BatchID)
		}
		return s
	}
	empty := measure()
	if want := []string{"queued", "queued-with-hook"}; !reflect.DeepEqual(empty.unfinished, want) {
		t.Errorf("unfinished %q, want %q", empty.unfinished, want)
	}
	if want := []string{"failed-with-hook"}; !reflect.DeepEqual(empty.overdue, want) {
		t.Errorf("overdue %q, want %q", empty.overdue, want)
	}

	seedOutcomes(t, c, st, tables.Batches, sweepOutcomes)
	for i := range 50 {
		id := "done-" + strconv.Itoa(i)
		create(id, evs.StateQueued, "")
		if _, err := st.TransitionBatch(ctx, "acct", id, []evs.State{evs.StateQueued}, evs.StateCancelled, "", t0); err != nil {
			t.Fatal(err)
		}
	}
	_, _, _ = st.Sweep(ctx, t0) // retires the batches finished since the last sweep

	full := measure()
	t.Logf("sweep reads with no outcomes: %v; with %d: %v", empty.reads, sweepOutcomes, full.reads)
	if !maps.Equal(full.reads, empty.reads) {
		t.Errorf("sweep reads with %d outcomes %v, with none %v", sweepOutcomes, full.reads, empty.reads)
	}
	if full.reads["Scan"] != 0 {
		t.Errorf("the sweep scanned the table %d times", full.reads["Scan"])
	}
	if !reflect.DeepEqual(full.unfinished, empty.unfinished) || !reflect.DeepEqual(full.overdue, empty.overdue) {
		t.Errorf("with outcomes the sweep found %+v, without %+v", full, empty)
	}
}

// seedOutcomes stores n outcomes of one account: one through PutOutcomes,
// then n-1 copies of its item under other addresses, 25 to a
// BatchWriteItem, which moto takes far faster than n conditional puts.
func seedOutcomes(t *testing.T, c *dynamodb.Client, st *dynamostore.Store, table string, n int) {
	t.Helper()
	ctx := context.Background()
	o := evs.Outcome{Address: "someone@example.com", Kind: evs.OutcomeBounced, BounceType: evs.BounceHard, At: t0}
	if _, err := st.PutOutcomes(ctx, "acct", []evs.Outcome{o}, t0.Add(365*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	out, err := c.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(table), KeyConditionExpression: aws.String("accountId = :a AND begins_with(id, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":a": &types.AttributeValueMemberS{Value: "~out#acct"}, ":p": &types.AttributeValueMemberS{Value: o.Address + "#"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var proto map[string]types.AttributeValue // the outcome, not its mark ("#~<class>")
	for _, it := range out.Items {
		if !strings.Contains(it["id"].(*types.AttributeValueMemberS).Value, "#~") {
			proto = it
		}
	}
	if proto == nil {
		t.Fatalf("no outcome item among %v", out.Items)
	}
	suffix := strings.TrimPrefix(proto["id"].(*types.AttributeValueMemberS).Value, o.Address)
	var next atomic.Int64
	var g errgroup.Group
	for range 8 {
		g.Go(func() error {
			for {
				first := int(next.Add(25)) - 25
				if first >= n-1 {
					return nil
				}
				var reqs []types.WriteRequest
				for i := first; i < min(first+25, n-1); i++ {
					it := maps.Clone(proto)
					it["id"] = &types.AttributeValueMemberS{Value: fmt.Sprintf("user%d@example.com%s", i, suffix)}
					reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
				}
				for len(reqs) > 0 {
					res, err := c.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
					if err != nil {
						return err
					}
					reqs = res.UnprocessedItems[table]
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("seeding outcomes: %v", err)
	}
}
