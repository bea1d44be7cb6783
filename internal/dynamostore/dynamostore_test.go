package dynamostore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/mototest"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(mototest.Main(m)) }

// newTables creates a fresh set of the four tables on moto.
func newTables(t testing.TB, c *dynamodb.Client) dynamostore.Tables {
	t.Helper()
	tables := dynamostore.Tables{
		Keys:        mototest.Name(t, "keys"),
		Batches:     mototest.Name(t, "batches"),
		Results:     mototest.Name(t, "results"),
		Idempotency: mototest.Name(t, "idem"),
	}
	if err := dynamostore.CreateTables(context.Background(), c, tables); err != nil {
		t.Fatalf("CreateTables: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range []string{tables.Keys, tables.Batches, tables.Results, tables.Idempotency} {
			_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(n)})
		}
	})
	return tables
}

// newStore is a store on fresh tables of the shared moto server.
func newStore(t testing.TB, now func() time.Time, opts ...func(*dynamodb.Options)) *dynamostore.Store {
	t.Helper()
	c := mototest.DynamoDB(t, opts...)
	return dynamostore.New(dynamostore.Config{Client: c, Tables: newTables(t, c), Now: now})
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return newStore(t, now)
	})
}
