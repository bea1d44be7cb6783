package store_test

// The store contract suite pins store.Store, and the address quota and
// result cache the stores also serve, from beside the interface: every
// contract runs here against both implementations, the embedded SQLite
// store (sqlitestore, on a fresh directory) and the DynamoDB adapter
// (dynamostore, on fresh tables of moto_server), so both behave the same
// way behind the service. It is test code, so it lives in _test.go files
// and not in testkit; a contract is checked for both stores or for none.

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.MotoMain(m)) }

// sqliteStore opens a fresh SQLite store in a directory of its own, closed
// when the test ends.
func sqliteStore(t *testing.T, now func() time.Time) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), t.TempDir(), now)
	if err != nil {
		t.Fatalf("sqlitestore.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// dynamoStore is a DynamoDB store on a fresh set of the four tables and an
// input bucket of the shared moto server. The tables are deleted when the
// test ends, so the server does not keep every test's rows in memory.
func dynamoStore(t *testing.T, now func() time.Time) *dynamostore.Store {
	t.Helper()
	c := testkit.DynamoDB(t)
	tables := dynamostore.Tables{
		Keys:        testkit.UniqueName(t, "keys"),
		Batches:     testkit.UniqueName(t, "batches"),
		Results:     testkit.UniqueName(t, "results"),
		Idempotency: testkit.UniqueName(t, "idem"),
	}
	if err := dynamostore.CreateTables(context.Background(), c, tables); err != nil {
		t.Fatalf("CreateTables: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range []string{tables.Keys, tables.Batches, tables.Results, tables.Idempotency} {
			_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(n)})
		}
	})
	objects := testkit.S3(t)
	tables.Inputs = testkit.Bucket(t, objects)
	// The presigner signs upload URLs, so the uploads contract runs too.
	return dynamostore.New(dynamostore.Config{Client: c, Objects: objects, Presign: s3.NewPresignClient(objects), Tables: tables, Now: now})
}

// The store contract's groups are top-level tests, each over both stores
// at once, and all the contract tests run in parallel: testkit gives each
// top-level test one of the moto servers, so the DynamoDB halves do not
// queue on one (it serves one request at a time).
func TestContractKeys(t *testing.T)        { runStoreContract(t, runKeys) }
func TestContractIdempotency(t *testing.T) { runStoreContract(t, runIdempotency) }
func TestContractBatches(t *testing.T)     { runStoreContract(t, runBatches) }
func TestContractListBatches(t *testing.T) { runStoreContract(t, runListing) }
func TestContractWebhooks(t *testing.T)    { runStoreContract(t, runWebhooks) }
func TestContractRules(t *testing.T)       { runStoreContract(t, runRules) }

func TestQuotaContract(t *testing.T) {
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) {
		runQuotaContract(t, func(t *testing.T) api.AddressQuota { return sqliteStore(t, time.Now) })
	})
	// The serving SQLite store keeps the counters in memory (its quota
	// mirror), a path of its own to the same contract.
	t.Run("SQLiteServing", func(t *testing.T) {
		runQuotaContract(t, func(t *testing.T) api.AddressQuota {
			s, err := sqlitestore.OpenServing(context.Background(), t.TempDir(), time.Now)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("DynamoDB", func(t *testing.T) {
		runQuotaContract(t, func(t *testing.T) api.AddressQuota { return dynamoStore(t, time.Now) })
	})
}

func TestResultCacheContract(t *testing.T) {
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) {
		runResultCacheContract(t, func(t *testing.T) cache.Store { return sqliteStore(t, time.Now) })
	})
	t.Run("DynamoDB", func(t *testing.T) {
		runResultCacheContract(t, func(t *testing.T) cache.Store { return dynamoStore(t, time.Now) })
	})
}

// storeFactory makes a fresh, empty store whose clock is now.
type storeFactory func(t *testing.T, now func() time.Time) store.Store

// runStoreContract runs one group of the store contract over both stores,
// in parallel. The group's newStore returns a fresh, empty store whose
// clock is now (tests move it to check expiry). Every subtest gets its own
// store.
func runStoreContract(t *testing.T, group func(t *testing.T, newStore storeFactory)) {
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		group(t, func(t *testing.T, now func() time.Time) store.Store { return sqliteStore(t, now) })
	})
	t.Run("DynamoDB", func(t *testing.T) {
		t.Parallel()
		group(t, func(t *testing.T, now func() time.Time) store.Store { return dynamoStore(t, now) })
	})
}

// base is the suite's starting time. It has whole milliseconds so that stores
// keeping millisecond precision round-trip it exactly.
var base = time.Date(2026, 11, 22, 10, 4, 5, 123_000_000, time.UTC)

// env is one subtest's fresh store and its clock.
type env struct {
	ctx   context.Context
	clock *testkit.Clock
	st    store.Store
}

func newEnv(t *testing.T, newStore storeFactory) *env {
	t.Helper()
	clk := testkit.NewClock(base)
	st := newStore(t, clk.Now)
	if st == nil {
		t.Fatal("newStore returned nil")
	}
	return &env{ctx: context.Background(), clock: clk, st: st}
}

// wantCode fails t unless err carries the evs error code want.
func wantCode(t *testing.T, err error, want, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got no error, want code %q", what, want)
	}
	if got := evs.ErrorCode(err); got != want {
		t.Fatalf("%s: got error %v (code %q), want code %q", what, err, got, want)
	}
	var e *evs.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %v is not an *evs.Error", what, err)
	}
}

// must fails t on a non-nil err.
func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// sameTime fails t unless got and want are the same instant.
func sameTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
