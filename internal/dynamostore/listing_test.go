package dynamostore_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
)

// listIDs is the account's whole list, in order.
func listIDs(t *testing.T, st *dynamostore.Store, accountID string) []string {
	t.Helper()
	bs, err := st.ListBatches(context.Background(), accountID, evs.BatchPos{}, 100)
	if err != nil {
		t.Fatalf("ListBatches: %v", err)
	}
	var ids []string
	for _, b := range bs {
		ids = append(ids, b.ID)
	}
	return ids
}

// A batch record written before the indexes existed has neither listKey
// nor the key of the index of active work; the sweep gives it both, so
// after an upgrade the old batches are listed in their place and swept.
func TestSweepBackfillsTheIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testkit.NewClock(t0)
	c := testkit.DynamoDB(t)
	tables := newTables(t, c)
	st := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(t), Tables: tables, Now: clk.Now})
	for i, id := range []string{"old-1", "new-1", "old-2"} {
		b := evs.Batch{ID: id, AccountID: "acct", Mode: "quick", State: evs.StateQueued,
			CreatedAt: t0.Add(time.Duration(i) * time.Second), ExpiresAt: t0.Add(time.Hour), Counters: evs.Counters{Total: 1}}
		if err := st.CreateBatch(ctx, b, itemsOf(1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"old-1", "old-2"} {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:        aws.String(tables.Batches),
			Key:              map[string]types.AttributeValue{"accountId": &types.AttributeValueMemberS{Value: "acct"}, "id": &types.AttributeValueMemberS{Value: id}},
			UpdateExpression: aws.String("REMOVE listKey, active"),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := listIDs(t, st, "acct"); !slices.Equal(got, []string{"new-1"}) {
		t.Fatalf("before the sweep the list is %q, want only new-1 (the others have no listKey)", got)
	}
	if un, err := st.UnfinishedBatches(ctx); err != nil || len(un) != 1 || un[0].ID != "new-1" {
		t.Fatalf("before the sweep UnfinishedBatches = %v, %v; want only new-1", un, err)
	}
	un, _, err := st.Sweep(ctx, clk.Now())
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	var ids []string
	for _, b := range un {
		ids = append(ids, b.ID)
	}
	if want := []string{"old-1", "new-1", "old-2"}; !slices.Equal(ids, want) {
		t.Errorf("the sweep's unfinished batches are %q, want %q", ids, want)
	}
	if got, want := listIDs(t, st, "acct"), []string{"old-2", "new-1", "old-1"}; !slices.Equal(got, want) {
		t.Fatalf("after the sweep the list is %q, want %q", got, want)
	}
}

// CreateTables on a Batches table made before its indexes existed adds
// them, so `evs sam-local-init` upgrades a local stack in place.
func TestCreateTablesAddsTheIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testkit.DynamoDB(t)
	tables := dynamostore.Tables{Batches: testkit.UniqueName(t, "batches")}
	old := dynamostore.Definitions(tables)[0]
	old.GlobalSecondaryIndexes = nil
	old.AttributeDefinitions = old.AttributeDefinitions[:2]
	if _, err := c.CreateTable(ctx, &old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropTables(c, tables) })
	if err := dynamostore.CreateTables(ctx, c, tables); err != nil {
		t.Fatalf("CreateTables on the old table: %v", err)
	}
	out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(tables.Batches)})
	if err != nil {
		t.Fatal(err)
	}
	def := dynamostore.Definitions(tables)[0]
	if len(out.Table.GlobalSecondaryIndexes) != len(def.GlobalSecondaryIndexes) || len(def.GlobalSecondaryIndexes) != 2 {
		t.Fatalf("indexes after CreateTables: %+v, want %d", out.Table.GlobalSecondaryIndexes, len(def.GlobalSecondaryIndexes))
	}
	got := map[string]string{}
	for _, g := range out.Table.GlobalSecondaryIndexes {
		got[aws.ToString(g.IndexName)] = keyString(g.KeySchema, out.Table.AttributeDefinitions)
	}
	for _, w := range def.GlobalSecondaryIndexes {
		if k := keyString(w.KeySchema, def.AttributeDefinitions); got[aws.ToString(w.IndexName)] != k {
			t.Errorf("index %s: %q, want %q", aws.ToString(w.IndexName), got[aws.ToString(w.IndexName)], k)
		}
	}
	tables.Inputs = testkit.Bucket(t, testkit.S3(t))
	st := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(t), Tables: tables, Now: func() time.Time { return t0 }})
	b := evs.Batch{ID: "b1", AccountID: "acct", Mode: "quick", State: evs.StateQueued, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), Counters: evs.Counters{Total: 1}}
	if err := st.CreateBatch(ctx, b, itemsOf(1)); err != nil {
		t.Fatal(err)
	}
	if got := listIDs(t, st, "acct"); !slices.Equal(got, []string{"b1"}) {
		t.Errorf("list on the upgraded table = %q, want [b1]", got)
	}
}

// A Scan of a large table outlasts an invocation, so the backfill goes on
// where the last sweep stopped: here each sweep reads one page of a table
// of several; the old batch is indexed, and the backfill marked done, after
// two passes (one that writes, one that finds nothing left).
func TestSweepBackfillResumesWhereItStopped(t *testing.T) {
	t.Parallel()
	defer dynamostore.SetBackfillBudget(0)()
	ctx := context.Background()
	c := testkit.DynamoDB(t)
	tables := newTables(t, c)
	st := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(t), Tables: tables, Now: clock})
	newBatch(t, st, "old", 1, 0)
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(tables.Batches),
		Key: map[string]types.AttributeValue{"accountId": s("acct"), "id": s("old")}, UpdateExpression: aws.String("REMOVE listKey, active")})
	if err != nil {
		t.Fatal(err)
	}
	// About 2.4 MB of items no index holds: three Scan pages or more.
	pad := strings.Repeat("x", 4000)
	for i := 0; i < 600; i += 25 {
		var reqs []types.WriteRequest
		for j := i; j < i+25; j++ {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
				"accountId": s("~pad"), "id": s(strconv.Itoa(j)), "pad": s(pad)}}})
		}
		if _, err := c.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{tables.Batches: reqs}}); err != nil {
			t.Fatal(err)
		}
	}
	marker := func() map[string]types.AttributeValue {
		out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(tables.Batches),
			Key: map[string]types.AttributeValue{"accountId": s("~backfill"), "id": s("indexes")}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item
	}
	listed := false
	for n := 1; ; n++ {
		// A new process each time, as each sweep message may reach another
		// instance.
		fresh := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(t), Tables: tables, Now: clock})
		un, _, err := fresh.Sweep(ctx, t0)
		if err != nil {
			t.Fatalf("sweep %d: %v", n, err)
		}
		listed = listed || len(un) == 1 && un[0].ID == "old"
		m := marker()
		if _, done := m["done"]; done {
			t.Logf("backfill done after %d one-page sweeps", n)
			if n < 4 || !listed {
				t.Errorf("done after %d sweeps (old batch listed: %v), want two passes of several pages each, and the batch listed", n, listed)
			}
			break
		}
		if _, ok := m["cursor"]; !ok && n == 1 {
			t.Fatalf("after one page the marker %v keeps no place", m)
		}
		if n == 20 {
			t.Fatalf("backfill not done after %d sweeps; marker %v", n, m)
		}
	}
	if got := listIDs(t, st, "acct"); !slices.Equal(got, []string{"old"}) {
		t.Errorf("the list after the backfill: %q, want [old]", got)
	}
}
