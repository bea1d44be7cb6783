package dynamostore_test

import (
	"context"
	"slices"
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

// A batch record written before the list index existed has no listKey;
// the sweep gives it one, so after an upgrade the old batches are listed
// in their place.
func TestSweepBackfillsTheBatchList(t *testing.T) {
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
			UpdateExpression: aws.String("REMOVE listKey"),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := listIDs(t, st, "acct"); !slices.Equal(got, []string{"new-1"}) {
		t.Fatalf("before the sweep the list is %q, want only new-1 (the others have no listKey)", got)
	}
	if _, _, err := st.Sweep(ctx, clk.Now()); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if got, want := listIDs(t, st, "acct"), []string{"old-2", "new-1", "old-1"}; !slices.Equal(got, want) {
		t.Fatalf("after the sweep the list is %q, want %q", got, want)
	}
}

// CreateTables on a Batches table made before the list index existed adds
// the index, so `evs sam-local-init` upgrades a local stack in place.
func TestCreateTablesAddsTheListIndex(t *testing.T) {
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
	want := dynamostore.Definitions(tables)[0].GlobalSecondaryIndexes
	if len(out.Table.GlobalSecondaryIndexes) != len(want) || len(want) != 1 {
		t.Fatalf("indexes after CreateTables: %+v, want %d", out.Table.GlobalSecondaryIndexes, len(want))
	}
	g := out.Table.GlobalSecondaryIndexes[0]
	if aws.ToString(g.IndexName) != aws.ToString(want[0].IndexName) ||
		keyString(g.KeySchema, out.Table.AttributeDefinitions) != keyString(want[0].KeySchema, dynamostore.Definitions(tables)[0].AttributeDefinitions) {
		t.Errorf("index %s %v, want %s %v", aws.ToString(g.IndexName), g.KeySchema, aws.ToString(want[0].IndexName), want[0].KeySchema)
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
