package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.MotoMain(m)) }

// newTables creates a fresh set of the four tables and an input bucket on
// moto.
func newTables(t testing.TB, c *dynamodb.Client) dynamostore.Tables {
	t.Helper()
	tables := dynamostore.Tables{
		Keys:        testkit.UniqueName(t, "keys"),
		Batches:     testkit.UniqueName(t, "batches"),
		Results:     testkit.UniqueName(t, "results"),
		Idempotency: testkit.UniqueName(t, "idem"),
	}
	if err := dynamostore.CreateTables(context.Background(), c, tables); err != nil {
		t.Fatalf("CreateTables: %v", err)
	}
	t.Cleanup(func() { dropTables(c, tables) })
	tables.Inputs = testkit.Bucket(t, testkit.S3(t))
	return tables
}

// dropTables deletes the tables, so the shared moto server does not keep
// every test's rows in memory; a table already gone is no error.
func dropTables(c *dynamodb.Client, tables dynamostore.Tables) {
	for _, n := range []string{tables.Keys, tables.Batches, tables.Results, tables.Idempotency} {
		_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(n)})
	}
}

// newStore is a store on fresh tables of the shared moto server.
func newStore(t testing.TB, now func() time.Time, opts ...func(*dynamodb.Options)) *dynamostore.Store {
	t.Helper()
	c := testkit.DynamoDB(t, opts...)
	return dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(t), Tables: newTables(t, c), Now: now})
}

// hook lets a test fail or alter calls of the client: before runs ahead of
// every call with its input and may fail it; after sees each call's error and
// returns the one the store gets.
type hook struct {
	before func(in any) error
	after  func(in any, err error) error
}

// inject adds h to a client as middleware ahead of the retryer, so an
// injected error is returned as is.
func inject(h hook) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("evs-test-hook",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if h.before != nil {
						if err := h.before(in.Parameters); err != nil {
							return middleware.InitializeOutput{}, middleware.Metadata{}, err
						}
					}
					out, md, err := next.HandleInitialize(ctx, in)
					if h.after != nil {
						err = h.after(in.Parameters, err)
					}
					return out, md, err
				}), middleware.After)
		})
	}
}

var (
	t0        = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clock     = func() time.Time { return t0 }
	errFault  = errors.New("injected fault")
	reasonSet = []evs.Reason{evs.ReasonAcceptedEmail, evs.ReasonRejectedEmail, evs.ReasonAcceptAll, evs.ReasonGreylisted}
)

// newBatch creates a queued batch of n items with dups duplicates.
func newBatch(t testing.TB, st store.Store, id string, n, dups int) evs.Batch {
	t.Helper()
	b := evs.Batch{ID: id, AccountID: "acct", Mode: "quick", State: evs.StateQueued,
		CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), Counters: evs.Counters{Total: n + dups, Duplicates: dups}}
	if err := st.CreateBatch(context.Background(), b, itemsOf(n)); err != nil {
		t.Fatalf("CreateBatch %s: %v", id, err)
	}
	return b
}

func itemsOf(n int) []evs.Item {
	items := make([]evs.Item, n)
	for i := range items {
		d := fmt.Sprintf("d%d.example", i%13)
		items[i] = evs.Item{Seq: i, Email: fmt.Sprintf("u%d@%s", i, d), Domain: d}
	}
	return items
}

// resultsOf returns the results of seqs [from, to); seq s gets status
// the status of reasonSet[s%4].
func resultsOf(from, to int) []evs.Result {
	rs := make([]evs.Result, 0, to-from)
	for s := from; s < to; s++ {
		rs = append(rs, evs.Result{Seq: s, Email: fmt.Sprintf("u%d@d%d.example", s, s%13),
			Decision: evs.Decision{Reason: reasonSet[s%4], DurationMs: int64(s)}})
	}
	return rs
}

// countersOf is what the counters of a batch with results for seqs [0, n)
// must be.
func countersOf(n, total, dups int) evs.Counters {
	c := evs.Counters{Total: total, Duplicates: dups, Processed: n}
	for s := range n {
		switch evs.StatusOf(reasonSet[s%4]) {
		case evs.Deliverable:
			c.Deliverable++
		case evs.Undeliverable:
			c.Undeliverable++
		case evs.Risky:
			c.Risky++
		case evs.Unknown:
			c.Unknown++
		}
	}
	return c
}

func wantCode(t *testing.T, err error, code, what string) {
	t.Helper()
	if got := evs.ErrorCode(err); got != code {
		t.Fatalf("%s: error %v (code %q), want code %q", what, err, got, code)
	}
}

// A redelivered SQS message repeats PutResults calls, whole or in part, in
// calls larger than one transaction; every result is counted once. The
// store finds already-written results from the old items DynamoDB returns
// with a cancelled transaction and, when it returns none, by reading them.
func TestRedeliveryCountsOnce(t *testing.T) {
	t.Parallel()
	for _, oldItems := range []bool{true, false} {
		t.Run(fmt.Sprintf("oldItems=%v", oldItems), func(t *testing.T) {
			ctx := context.Background()
			var h hook
			if !oldItems {
				h.after = func(_ any, err error) error {
					var tc *types.TransactionCanceledException
					if errors.As(err, &tc) {
						for i := range tc.CancellationReasons {
							tc.CancellationReasons[i].Item = nil
						}
					}
					return err
				}
			}
			st := newStore(t, clock, inject(h))
			const n = 250
			newBatch(t, st, "b1", n, 4)
			steps := []struct {
				name     string
				from, to int
				want     int // results written after the step
			}{
				{"first half", 0, 120, 120},
				{"same again", 0, 120, 120},
				{"overlapping, over several transactions", 60, 200, 200},
				{"all but the last", 0, n - 1, n - 1},
				{"everything", 0, n, n},
				{"everything after completion", 0, n, n},
			}
			for _, s := range steps {
				b, err := st.PutResults(ctx, "acct", "b1", resultsOf(s.from, s.to), t0.Add(time.Minute))
				if err != nil {
					t.Fatalf("%s: PutResults: %v", s.name, err)
				}
				if want := countersOf(s.want, n+4, 4); b.Counters != want {
					t.Fatalf("%s: counters %+v, want %+v", s.name, b.Counters, want)
				}
				if wantState := map[bool]evs.State{true: evs.StateCompleted, false: evs.StateQueued}[s.want == n]; b.State != wantState {
					t.Fatalf("%s: state %s, want %s", s.name, b.State, wantState)
				}
			}
			rs, err := st.Results(ctx, "acct", "b1", -1, 1000, "")
			if err != nil || len(rs) != n {
				t.Fatalf("Results = %d results, %v; want %d", len(rs), err, n)
			}
			for i, r := range rs {
				if want := resultsOf(i, i+1)[0]; r.Seq != want.Seq || r.Status() != want.Status() || r.Email != want.Email || r.Decision.Reason != want.Decision.Reason || r.Decision.DurationMs != want.Decision.DurationMs {
					t.Fatalf("Results[%d] = %+v, want %+v", i, r, want)
				}
			}

			// A result for a seq the batch does not have is refused, and its
			// transaction's other results are not written either.
			newBatch(t, st, "b2", 3, 0)
			bad := append(resultsOf(0, 2), evs.Result{Seq: 7, Decision: evs.Decision{Reason: evs.ReasonAcceptAll}})
			_, err = st.PutResults(ctx, "acct", "b2", bad, t0)
			wantCode(t, err, evs.CodeInvalidRequest, "PutResults with an unknown seq")
			b, err := st.Batch(ctx, "acct", "b2")
			if err != nil || b.Counters.Processed != 0 {
				t.Fatalf("batch after the refused results: %+v, %v; want nothing processed", b.Counters, err)
			}
			_, err = st.PutResults(ctx, "acct", "b2", []evs.Result{{Seq: 0, Decision: evs.Decision{Reason: "excellent"}}}, t0)
			wantCode(t, err, evs.CodeInvalidRequest, "PutResults with an unknown status")
		})
	}
}

// A crash between the last results transaction and the batch's completion
// leaves the batch running with every result; the redelivered message
// completes it without counting anything again.
func TestRedeliveryCompletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var failUpdates atomic.Bool
	st := newStore(t, clock, inject(hook{before: func(in any) error {
		if _, ok := in.(*dynamodb.UpdateItemInput); ok && failUpdates.Load() {
			return errFault
		}
		return nil
	}}))
	newBatch(t, st, "b1", 10, 0)
	failUpdates.Store(true)
	_, err := st.PutResults(ctx, "acct", "b1", resultsOf(0, 10), t0.Add(time.Minute))
	if !errors.Is(err, errFault) {
		t.Fatalf("PutResults with completion failing: %v, want the injected fault", err)
	}
	failUpdates.Store(false)
	b, err := st.Batch(ctx, "acct", "b1")
	if err != nil || b.State != evs.StateQueued || b.Counters != countersOf(10, 10, 0) {
		t.Fatalf("batch after the crash = %+v, %v; want queued with every result counted", b, err)
	}
	done := t0.Add(2 * time.Minute)
	b, err = st.PutResults(ctx, "acct", "b1", resultsOf(0, 10), done)
	if err != nil || b.State != evs.StateCompleted || !b.CompletedAt.Equal(done) || b.Counters != countersOf(10, 10, 0) {
		t.Fatalf("redelivered PutResults = %+v, %v; want completed at %v, counted once", b, err, done)
	}
}

// Concurrent transactions on the batch record are cancelled by DynamoDB
// with TransactionConflict (moto never does it, so it is injected); the
// store retries them and counts each result once.
func TestTransactionConflictRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var calls atomic.Int32
	st := newStore(t, clock, inject(hook{before: func(in any) error {
		tx, ok := in.(*dynamodb.TransactWriteItemsInput)
		if !ok || calls.Add(1) > 2 {
			return nil
		}
		reasons := make([]types.CancellationReason, len(tx.TransactItems))
		for i := range reasons {
			reasons[i].Code = aws.String("None")
		}
		reasons[len(reasons)-1].Code = aws.String("TransactionConflict")
		return &types.TransactionCanceledException{Message: aws.String("conflict"), CancellationReasons: reasons}
	}}))
	newBatch(t, st, "b1", 30, 0)
	b, err := st.PutResults(ctx, "acct", "b1", resultsOf(0, 30), t0)
	if err != nil {
		t.Fatalf("PutResults: %v", err)
	}
	if b.Counters != countersOf(30, 30, 0) || b.State != evs.StateCompleted {
		t.Fatalf("after conflicts: %+v, want completed with 30 counted", b)
	}
	if got := calls.Load(); got != 3 {
		t.Errorf("TransactWriteItems calls = %d, want 3 (two conflicts, one success)", got)
	}
}

// CreateBatch stores the input before it puts the batch record: a crash
// (here an injected fault) at either step leaves no batch a reader can
// see, not even a half-written one, and nothing to resume.
func TestCreateBatchCrashLeavesNothingVisible(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		failInput  bool
		failRecord bool
	}{
		{"storing the input", true, false},
		{"putting the record", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			c1 := testkit.DynamoDB(t, inject(hook{before: func(in any) error {
				if _, ok := in.(*dynamodb.PutItemInput); ok && c.failRecord {
					return errFault
				}
				return nil
			}}))
			objects := testkit.S3(t, func(o *s3.Options) {
				o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
					return st.Initialize.Add(middleware.InitializeMiddlewareFunc("evs-test-fault",
						func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
							if _, ok := in.Parameters.(*s3.PutObjectInput); ok && c.failInput {
								return middleware.InitializeOutput{}, middleware.Metadata{}, errFault
							}
							return next.HandleInitialize(ctx, in)
						}), middleware.Before)
				})
			})
			tables := newTables(t, c1)
			crashing := dynamostore.New(dynamostore.Config{Client: c1, Objects: objects, Tables: tables, Now: clock})
			b := evs.Batch{ID: "b1", AccountID: "acct", Mode: "quick", State: evs.StateQueued,
				CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), Counters: evs.Counters{Total: 1000}}
			err := crashing.CreateBatch(ctx, b, itemsOf(1000))
			if !errors.Is(err, errFault) {
				t.Fatalf("CreateBatch: %v, want the injected fault", err)
			}

			// Another process's view of the same tables.
			st := dynamostore.New(dynamostore.Config{Client: testkit.DynamoDB(t), Objects: testkit.S3(t), Tables: tables, Now: clock})
			_, err = st.Batch(ctx, "acct", "b1")
			wantCode(t, err, evs.CodeNotFound, "Batch")
			_, _, err = st.InputItems(ctx, "acct", "b1", 0, 10)
			wantCode(t, err, evs.CodeNotFound, "InputItems")
			_, err = st.Results(ctx, "acct", "b1", -1, 10, "")
			wantCode(t, err, evs.CodeNotFound, "Results")
			_, err = st.PutResults(ctx, "acct", "b1", resultsOf(0, 5), t0)
			wantCode(t, err, evs.CodeNotFound, "PutResults")
			_, err = st.TransitionBatch(ctx, "acct", "b1", []evs.State{evs.StateQueued}, evs.StateRunning, "", t0)
			wantCode(t, err, evs.CodeNotFound, "TransitionBatch")
			unfinished, err := st.UnfinishedBatches(ctx)
			if err != nil || len(unfinished) != 0 {
				t.Fatalf("UnfinishedBatches = %+v, %v; want none", unfinished, err)
			}
		})
	}
}

// Past ExpiresAt a batch and an idempotency record read as missing while
// their items are still in the tables: DynamoDB's TTL deletes them lazily.
func TestExpiredRecordsStayInTablesButReadAsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := testkit.NewClock(t0)
	c := testkit.DynamoDB(t)
	tables := newTables(t, c)
	st := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(t), Tables: tables, Now: clk.Now})
	newBatch(t, st, "b1", 3, 0)
	rec := idempotency.Record{Scope: "s", Fingerprint: "f", State: idempotency.InProgress, LockedUntil: t0.Add(2 * time.Hour), ExpiresAt: t0.Add(time.Hour)}
	if _, _, err := st.ClaimIdempotency(ctx, rec, t0); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(time.Hour))
	_, err := st.Batch(ctx, "acct", "b1")
	wantCode(t, err, evs.CodeNotFound, "Batch at ExpiresAt")
	if unfinished, err := st.UnfinishedBatches(ctx); err != nil || len(unfinished) != 0 {
		t.Fatalf("UnfinishedBatches = %v, %v; want none", unfinished, err)
	}
	_, err = st.TransitionBatch(ctx, "acct", "b1", []evs.State{evs.StateQueued}, evs.StateRunning, "", clk.Now())
	wantCode(t, err, evs.CodeNotFound, "TransitionBatch at ExpiresAt")
	rec2 := rec
	rec2.Fingerprint = "g"
	if _, claimed, err := st.ClaimIdempotency(ctx, rec2, clk.Now()); err != nil || !claimed {
		t.Fatalf("claim of an expired scope: claimed=%v, %v", claimed, err)
	}
	out, err := c.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(tables.Batches)})
	if err != nil || len(out.Items) != 1 {
		t.Fatalf("Batches table holds %d items (%v), want the expired one still there", len(out.Items), err)
	}
	if _, ok := out.Items[0]["expiresAt"].(*types.AttributeValueMemberN); !ok {
		t.Errorf("batch item has no numeric TTL attribute expiresAt: %v", out.Items[0])
	}
}

// The tables CreateTables makes on moto have exactly the schemas
// Definitions describes, on-demand billing and TTL on expiresAt; a second
// call leaves them alone; unnamed tables are skipped.
func TestCreateTablesMatchesDefinitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testkit.DynamoDB(t)
	tables := newTables(t, c)
	if err := dynamostore.CreateTables(ctx, c, tables); err != nil {
		t.Fatalf("second CreateTables: %v", err)
	}
	defs := dynamostore.Definitions(tables)
	if len(defs) != 4 {
		t.Fatalf("Definitions of four named tables = %d definitions", len(defs))
	}
	wantKeys := map[string]string{
		tables.Keys:        "pk S HASH",
		tables.Batches:     "accountId S HASH, id S RANGE",
		tables.Results:     "batchId S HASH, seq N RANGE",
		tables.Idempotency: "scope S HASH",
	}
	for _, d := range defs {
		name := aws.ToString(d.TableName)
		if got := keyString(d.KeySchema, d.AttributeDefinitions); got != wantKeys[name] {
			t.Errorf("Definitions %s key = %q, want %q", name, got, wantKeys[name])
		}
		out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: d.TableName})
		if err != nil {
			t.Fatalf("DescribeTable %s: %v", name, err)
		}
		tbl := out.Table
		if got := keyString(tbl.KeySchema, tbl.AttributeDefinitions); got != wantKeys[name] {
			t.Errorf("created %s key = %q, want %q", name, got, wantKeys[name])
		}
		if tbl.TableStatus != types.TableStatusActive {
			t.Errorf("%s status %s, want ACTIVE", name, tbl.TableStatus)
		}
		if tbl.BillingModeSummary == nil || tbl.BillingModeSummary.BillingMode != types.BillingModePayPerRequest {
			t.Errorf("%s billing %+v, want PAY_PER_REQUEST", name, tbl.BillingModeSummary)
		}
		ttl, err := c.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: d.TableName})
		if err != nil {
			t.Fatalf("DescribeTimeToLive %s: %v", name, err)
		}
		if d := ttl.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != "expiresAt" || d.TimeToLiveStatus != types.TimeToLiveStatusEnabled {
			t.Errorf("%s TTL = %+v, want enabled on expiresAt", name, d)
		}
	}
	if defs := dynamostore.Definitions(dynamostore.Tables{Keys: "k"}); len(defs) != 1 || aws.ToString(defs[0].TableName) != "k" {
		t.Errorf("Definitions of the keys table alone = %d definitions", len(defs))
	}
}

// keyString renders a key schema as "name type KEYTYPE, ...".
func keyString(ks []types.KeySchemaElement, attrs []types.AttributeDefinition) string {
	typ := map[string]string{}
	for _, a := range attrs {
		typ[aws.ToString(a.AttributeName)] = string(a.AttributeType)
	}
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %s %s", aws.ToString(k.AttributeName), typ[aws.ToString(k.AttributeName)], k.KeyType))
	}
	return strings.Join(parts, ", ")
}

// closedEndpoint is the URL of a loopback port nothing listens on.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// Every dependency fault — a refused connection, a missing table,
// throttling, a deadline — is CodeUnavailable wrapping its cause, and the
// client-facing message does not carry the AWS text.
func TestFaultsAreUnavailable(t *testing.T) {
	t.Parallel()
	cfg := testkit.AWSConfig(t)
	cfg.Retryer = func() aws.Retryer { return retry.AddWithMaxAttempts(retry.NewStandard(), 1) }
	closed := cfg.Copy()
	closed.BaseEndpoint = aws.String(closedEndpoint(t))
	throttled := hook{before: func(any) error {
		return &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
	}}
	tables := dynamostore.Tables{Keys: "k", Batches: "b", Results: "r", Idempotency: "i", Inputs: "no-such-bucket"}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	stores := []struct {
		name string
		ctx  context.Context
		st   *dynamostore.Store
	}{
		{"closed port", context.Background(), dynamostore.New(dynamostore.Config{Client: dynamodb.NewFromConfig(closed), Objects: dynamostore.S3(closed), Tables: tables, Now: clock})},
		{"missing tables", context.Background(), dynamostore.New(dynamostore.Config{Client: dynamodb.NewFromConfig(cfg), Objects: dynamostore.S3(cfg),
			Tables: dynamostore.Tables{Keys: testkit.UniqueName(t, "none"), Batches: testkit.UniqueName(t, "none"),
				Results: testkit.UniqueName(t, "none"), Idempotency: testkit.UniqueName(t, "none"), Inputs: "no-such-bucket"}, Now: clock})},
		{"throttled", context.Background(), dynamostore.New(dynamostore.Config{Client: dynamodb.NewFromConfig(cfg, inject(throttled)), Objects: dynamostore.S3(cfg), Tables: tables, Now: clock})},
		{"cancelled context", cancelled, dynamostore.New(dynamostore.Config{Client: dynamodb.NewFromConfig(cfg), Objects: dynamostore.S3(cfg), Tables: tables, Now: clock})},
	}
	rec := idempotency.Record{Scope: "s", Fingerprint: "f", LockedUntil: t0.Add(time.Minute), ExpiresAt: t0.Add(time.Hour)}
	batch := evs.Batch{ID: "b1", AccountID: "acct", State: evs.StateQueued, ExpiresAt: t0.Add(time.Hour), Counters: evs.Counters{Total: 3}}
	ops := []struct {
		name string
		call func(ctx context.Context, st *dynamostore.Store) error
	}{
		{"CreateAccount", func(ctx context.Context, st *dynamostore.Store) error {
			return st.CreateAccount(ctx, evs.Account{ID: "a", Name: "n"})
		}},
		{"Account", func(ctx context.Context, st *dynamostore.Store) error { _, err := st.Account(ctx, "a"); return err }},
		{"AccountByName", func(ctx context.Context, st *dynamostore.Store) error {
			_, err := st.AccountByName(ctx, "n")
			return err
		}},
		{"CountAccounts", func(ctx context.Context, st *dynamostore.Store) error { _, err := st.CountAccounts(ctx); return err }},
		{"CreateKey", func(ctx context.Context, st *dynamostore.Store) error {
			return st.CreateKey(ctx, evs.Key{ID: "0123456789ab", Hash: "h", AccountID: "a"})
		}},
		{"KeyByHash", func(ctx context.Context, st *dynamostore.Store) error { _, err := st.KeyByHash(ctx, "h"); return err }},
		{"RevokeKey", func(ctx context.Context, st *dynamostore.Store) error {
			_, err := st.RevokeKey(ctx, "h", t0)
			return err
		}},
		{"ListKeys", func(ctx context.Context, st *dynamostore.Store) error { _, err := st.ListKeys(ctx); return err }},
		{"ClaimIdempotency", func(ctx context.Context, st *dynamostore.Store) error {
			_, _, err := st.ClaimIdempotency(ctx, rec, t0)
			return err
		}},
		{"CompleteIdempotency", func(ctx context.Context, st *dynamostore.Store) error {
			return st.CompleteIdempotency(ctx, "s", 200, nil, nil)
		}},
		{"ReleaseIdempotency", func(ctx context.Context, st *dynamostore.Store) error { return st.ReleaseIdempotency(ctx, "s") }},
		{"CreateBatch", func(ctx context.Context, st *dynamostore.Store) error { return st.CreateBatch(ctx, batch, itemsOf(3)) }},
		{"Batch", func(ctx context.Context, st *dynamostore.Store) error {
			_, err := st.Batch(ctx, "acct", "b1")
			return err
		}},
		{"TransitionBatch", func(ctx context.Context, st *dynamostore.Store) error {
			_, err := st.TransitionBatch(ctx, "acct", "b1", []evs.State{evs.StateQueued}, evs.StateRunning, "", t0)
			return err
		}},
		{"PutResults", func(ctx context.Context, st *dynamostore.Store) error {
			_, err := st.PutResults(ctx, "acct", "b1", resultsOf(0, 3), t0)
			return err
		}},
		{"Results", func(ctx context.Context, st *dynamostore.Store) error {
			_, err := st.Results(ctx, "acct", "b1", -1, 10, "")
			return err
		}},
		{"InputItems", func(ctx context.Context, st *dynamostore.Store) error {
			_, _, err := st.InputItems(ctx, "acct", "b1", 0, 10)
			return err
		}},
		{"UnfinishedBatches", func(ctx context.Context, st *dynamostore.Store) error {
			_, err := st.UnfinishedBatches(ctx)
			return err
		}},
	}
	for _, s := range stores {
		for _, op := range ops {
			t.Run(s.name+"/"+op.name, func(t *testing.T) {
				err := op.call(s.ctx, s.st)
				wantCode(t, err, evs.CodeUnavailable, op.name)
				var e *evs.Error
				if !errors.As(err, &e) || e.Err == nil {
					t.Fatalf("%s: %v is not an *evs.Error wrapping its cause", op.name, err)
				}
				if strings.Contains(evs.ErrorMessage(err), "127.0.0.1") || strings.Contains(evs.ErrorMessage(err), "dynamodb") ||
					strings.Contains(evs.ErrorMessage(err), "slow down") {
					t.Errorf("%s: client-facing message %q carries the cause", op.name, evs.ErrorMessage(err))
				}
			})
		}
	}
	t.Run("CreateTables on a closed port", func(t *testing.T) {
		err := dynamostore.CreateTables(context.Background(), dynamodb.NewFromConfig(closed), tables)
		wantCode(t, err, evs.CodeUnavailable, "CreateTables")
	})
}

// TestClaimReturnsTheBlockingRecord: a losing claim learns the record that
// beat it from the failed conditional write itself (ALL_OLD), with no
// second read, and gets that record's fingerprint and state to compare.
func TestClaimReturnsTheBlockingRecord(t *testing.T) {
	t.Parallel()
	var reads atomic.Int32
	st := newStore(t, clock, inject(hook{before: func(in any) error {
		if _, ok := in.(*dynamodb.GetItemInput); ok {
			reads.Add(1)
		}
		return nil
	}}))
	ctx := context.Background()
	rec := idempotency.Record{Scope: "acct\x00POST /v1/verify\x00k1", Fingerprint: "fp-1", State: idempotency.InProgress,
		LockedUntil: t0.Add(5 * time.Minute), ExpiresAt: t0.Add(24 * time.Hour)}
	if _, claimed, err := st.ClaimIdempotency(ctx, rec, t0); err != nil || !claimed {
		t.Fatalf("first claim: %v %v", claimed, err)
	}
	second := rec
	second.Fingerprint = "fp-2"
	existing, claimed, err := st.ClaimIdempotency(ctx, second, t0.Add(time.Second))
	if err != nil || claimed {
		t.Fatalf("second claim: claimed=%v err=%v, want the existing record", claimed, err)
	}
	if existing.Fingerprint != "fp-1" || existing.State != idempotency.InProgress || !existing.LockedUntil.Equal(rec.LockedUntil) {
		t.Fatalf("existing record %+v, want the first claim's", existing)
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("the losing claim read the record %d times; ALL_OLD should have returned it", n)
	}
}

// lostReply is a retryable error: the SDK resends the request.
type lostReply struct{}

func (lostReply) Error() string        { return "injected: the reply was lost" }
func (lostReply) RetryableError() bool { return true }

// TestCreateBatchSurvivesLostReplies: when the reply to CreateBatch's
// conditional put of the batch record is lost after DynamoDB applied it, the
// SDK's retry fails its condition against our own write. CreateBatch must
// recognise its own record and succeed, not report a conflict or a
// vanished batch.
func TestCreateBatchSurvivesLostReplies(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"PutItem"} {
		t.Run(op, func(t *testing.T) {
			l := loseReply(op, true)
			st := newStore(t, clock, l.option)
			b := newBatch(t, st, "lost-"+op, 5, 1)
			l.retried(t)
			got, err := st.Batch(context.Background(), b.AccountID, b.ID)
			if err != nil || got.State != evs.StateQueued || got.Counters.Total != 6 {
				t.Fatalf("batch after lost reply: %+v %v", got, err)
			}
		})
	}
}

// TestKeysSurviveLostReplies: CreateAccount and CreateKey are transactions;
// when the reply to one is lost after DynamoDB applied it, the SDK resends it
// (moto does not honour ClientRequestToken) and it fails its conditions
// against its own items. Both must recognise their own write and succeed,
// not report "already exists"; a real duplicate is still refused.
func TestKeysSurviveLostReplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := loseReply("TransactWriteItems", true)
	st := newStore(t, clock, l.option)
	a := evs.Account{ID: "acct-lost", Name: "lost-" + t.Name(), CreatedAt: clock()}
	if err := st.CreateAccount(ctx, a); err != nil {
		t.Fatalf("CreateAccount after a lost reply: %v", err)
	}
	l.retried(t)
	if err := st.CreateAccount(ctx, a); evs.ErrorCode(err) != evs.CodeInvalidState {
		t.Fatalf("a second CreateAccount: %v, want invalid_state", err)
	}
	l = loseReply("TransactWriteItems", true)
	st = newStore(t, clock, l.option)
	a2 := evs.Account{ID: "acct-lost-2", Name: "lost2-" + t.Name(), CreatedAt: clock()}
	l.armed.Store(false)
	if err := st.CreateAccount(ctx, a2); err != nil {
		t.Fatal(err)
	}
	l.armed.Store(true)
	k := evs.Key{ID: "0123456789ab", Hash: "0123456789ab" + strings.Repeat("c", 52), AccountID: a2.ID, CreatedAt: clock()}
	if err := st.CreateKey(ctx, k); err != nil {
		t.Fatalf("CreateKey after a lost reply: %v", err)
	}
	l.retried(t)
	if got, err := st.KeyByHash(ctx, k.Hash); err != nil || got.AccountID != a2.ID {
		t.Fatalf("key after a lost reply: %+v %v", got, err)
	}
	if err := st.CreateKey(ctx, k); evs.ErrorCode(err) != evs.CodeInvalidState {
		t.Fatalf("a second CreateKey: %v, want invalid_state", err)
	}
}

// TestDeliverySurvivesLostReplies: ClaimDelivery and RecordDelivery are
// conditional updates; when the reply to one is lost after DynamoDB applied
// it, the SDK's resend fails the condition against the call's own write.
// Both must recognise it and succeed, not report the delivery as taken.
func TestDeliverySurvivesLostReplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := loseReply("UpdateItem", false)
	st := newStore(t, clock, l.option)
	b := evs.Batch{ID: "hooked", AccountID: "acct", Mode: evs.ModeQuick, State: evs.StateQueued, CallbackURL: "https://hooks.example.com/evs",
		CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), Counters: evs.Counters{Total: 1}}
	if err := st.CreateBatch(ctx, b, itemsOf(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TransitionBatch(ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateCancelled, "", t0); err != nil {
		t.Fatal(err)
	}
	l.armed.Store(true)
	d, err := st.ClaimDelivery(ctx, b.AccountID, b.ID, 0, t0, t0.Add(15*time.Second))
	if err != nil || d.Attempts != 1 {
		t.Fatalf("claim after a lost reply: %+v %v", d, err)
	}
	l.retried(t)
	l.calls.Store(0) // drop the next UpdateItem's reply too
	d.State, d.LastStatus = evs.CallbackDelivered, 204
	if err := st.RecordDelivery(ctx, d); err != nil {
		t.Fatalf("record after a lost reply: %v", err)
	}
	l.retried(t)
	got, err := st.Delivery(ctx, b.AccountID, b.ID)
	if err != nil || got.State != evs.CallbackDelivered || got.Attempts != 1 || got.LastStatus != 204 {
		t.Fatalf("delivery %+v %v", got, err)
	}
	// A new webhook secret whose put reply is lost is still stored, once.
	pl := loseReply("PutItem", true)
	st2 := newStore(t, clock, pl.option)
	sec := evs.WebhookSecret{AccountID: "acct", Current: "whsec_" + strings.Repeat("A", 43)}
	if err := st2.PutWebhookSecret(ctx, sec, ""); err != nil {
		t.Fatalf("secret after a lost reply: %v", err)
	}
	pl.retried(t)
	if err := st2.PutWebhookSecret(ctx, evs.WebhookSecret{AccountID: "acct", Current: "whsec_other"}, ""); evs.ErrorCode(err) != evs.CodeInvalidState {
		t.Fatalf("a second first secret: %v, want invalid_state", err)
	}
	// Another worker's stale claim of the same attempt is still refused.
	if _, err := st.ClaimDelivery(ctx, b.AccountID, b.ID, 0, t0, t0.Add(time.Minute)); evs.ErrorCode(err) != evs.CodeInvalidState {
		t.Fatalf("a stale claim: %v, want invalid_state", err)
	}
}

// replyLoser drops the reply to the first call of op made while it is
// armed, after DynamoDB has applied the call and inside the SDK's retry
// loop (end of Finalize), so the SDK resends it; calls counts the armed
// attempts of op.
type replyLoser struct {
	op    string
	armed atomic.Bool
	calls atomic.Int32
}

func loseReply(op string, armed bool) *replyLoser {
	l := &replyLoser{op: op}
	l.armed.Store(armed)
	return l
}

func (l *replyLoser) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("evs-test-lose-reply",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleFinalize(ctx, in)
				if middleware.GetOperationName(ctx) == l.op && l.armed.Load() && l.calls.Add(1) == 1 && err == nil {
					return out, md, lostReply{}
				}
				return out, md, err
			}), middleware.After)
	})
}

// retried fails t unless the SDK resent the call whose reply was lost.
func (l *replyLoser) retried(t *testing.T) {
	t.Helper()
	if n := l.calls.Load(); n < 2 {
		t.Fatalf("%s was not retried after the lost reply (%d calls)", l.op, n)
	}
}

// TestClaimSurvivesALostReply: a claim whose reply is lost is retried by
// the SDK and fails its condition against its own record. It must still
// count as claimed; otherwise the caller answers its own first request
// with 409 "in progress" and the key stays blocked until the lock lapses.
func TestClaimSurvivesALostReply(t *testing.T) {
	t.Parallel()
	l := loseReply("PutItem", true)
	st := newStore(t, clock, l.option)
	ctx := context.Background()
	rec := idempotency.Record{Scope: "acct\x00POST /v1/verify\x00lost", Fingerprint: "fp-1", State: idempotency.InProgress,
		LockedUntil: t0.Add(5 * time.Minute), ExpiresAt: t0.Add(24 * time.Hour)}
	if _, claimed, err := st.ClaimIdempotency(ctx, rec, t0); err != nil || !claimed {
		t.Fatalf("claim after a lost reply: claimed=%v err=%v, want claimed", claimed, err)
	}
	l.retried(t)
	// A different request with the same key still loses to it.
	other := rec
	other.Fingerprint = "fp-2"
	existing, claimed, err := st.ClaimIdempotency(ctx, other, t0.Add(time.Second))
	if err != nil || claimed || existing.Fingerprint != "fp-1" {
		t.Fatalf("second claim: %+v claimed=%v err=%v, want the first claim's record", existing, claimed, err)
	}
}

// TestCompleteSurvivesALostReply: storing the reply is resent after a lost
// reply and finds the record already done — by itself. That is success,
// not "no record in progress" (which the caller would turn into a 500 for
// a call that worked).
func TestCompleteSurvivesALostReply(t *testing.T) {
	t.Parallel()
	l := loseReply("UpdateItem", true)
	st := newStore(t, clock, l.option)
	ctx := context.Background()
	rec := idempotency.Record{Scope: "acct\x00POST /v1/requests\x00done", Fingerprint: "fp", State: idempotency.InProgress,
		LockedUntil: t0.Add(5 * time.Minute), ExpiresAt: t0.Add(24 * time.Hour)}
	if _, claimed, err := st.ClaimIdempotency(ctx, rec, t0); err != nil || !claimed {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	if err := st.CompleteIdempotency(ctx, rec.Scope, 202, map[string]string{"Location": "/v1/requests/r1"}, []byte(`{"id":"r1"}`)); err != nil {
		t.Fatalf("complete after a lost reply: %v", err)
	}
	l.retried(t)
	got, claimed, err := st.ClaimIdempotency(ctx, rec, t0.Add(time.Second))
	if err != nil || claimed || got.State != idempotency.Done || got.StatusCode != 202 || string(got.Body) != `{"id":"r1"}` {
		t.Fatalf("record after completion: %+v claimed=%v err=%v", got, claimed, err)
	}
	// A second completion is still refused: a reply is stored once.
	if err := st.CompleteIdempotency(ctx, rec.Scope, 500, nil, nil); evs.ErrorCode(err) != evs.CodeNotFound {
		t.Fatalf("second completion: %v, want %s", err, evs.CodeNotFound)
	}
}

// TestTransitionSurvivesALostReply: a cancel whose reply is lost is resent
// and finds the batch cancelled — by itself. The caller gets the cancelled
// batch, not 409 "the request is cancelled" for its own cancel; a second,
// separate cancel still gets the 409.
func TestTransitionSurvivesALostReply(t *testing.T) {
	t.Parallel()
	l := loseReply("UpdateItem", false)
	st := newStore(t, clock, l.option)
	ctx := context.Background()
	b := newBatch(t, st, "lost-cancel", 4, 0)
	l.armed.Store(true)
	got, err := st.TransitionBatch(ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued, evs.StateRunning}, evs.StateCancelled, "", t0)
	if err != nil || got.State != evs.StateCancelled {
		t.Fatalf("cancel after a lost reply: %+v %v", got, err)
	}
	l.retried(t)
	if _, err := st.TransitionBatch(ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued, evs.StateRunning}, evs.StateCancelled, "", t0); evs.ErrorCode(err) != evs.CodeInvalidState {
		t.Fatalf("second cancel: %v, want %s", err, evs.CodeInvalidState)
	}
}

// A cache entry carries the TTL attribute (epoch seconds, rounded up), so
// DynamoDB deletes it once it has expired.
func TestResultCacheTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testkit.DynamoDB(t)
	tables := newTables(t, c)
	s := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(t), Tables: tables})
	exp := time.Date(2026, 11, 22, 10, 0, 0, 1_000_000, time.UTC)
	d := evs.Decision{Email: "bob@example.com", Normalized: "bob@example.com", Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeFull}
	if err := s.KeepDecisions(ctx, "acct", []store.CacheEntry{{Decision: d, ExpiresAt: exp}}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(tables.Results), Key: map[string]types.AttributeValue{
		"batchId": &types.AttributeValueMemberS{Value: "~cache#acct#full#bob@example.com"},
		"seq":     &types.AttributeValueMemberN{Value: "0"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ttl, ok := out.Item["expiresAt"].(*types.AttributeValueMemberN)
	if want := strconv.FormatInt(exp.Unix()+1, 10); !ok || ttl.Value != want {
		t.Fatalf("TTL attribute %#v, want %s", out.Item["expiresAt"], want)
	}
}

// TestExportRunSurvivesLostReplies: when the reply to the put that starts
// an export run is lost after DynamoDB applied it, the SDK's resend fails
// its condition against the run itself. StartExport must report the run as
// started by this call, which then queues it; reported as another's, no
// message would ever run it and the export would answer 202 until its
// deadline. Another call's start still finds the run and starts nothing.
func TestExportRunSurvivesLostReplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := loseReply("PutItem", true)
	st := newStore(t, clock, l.option)
	j := store.ExportJob{AccountID: "acct-lost", BatchID: "b1", Filters: "status=risky"}
	got, started, err := st.StartExport(ctx, j, "", t0.Add(time.Hour), 0)
	if err != nil || !started || got.Token == "" || got.State != store.ExportRunning {
		t.Fatalf("start after a lost reply: %+v started=%v %v", got, started, err)
	}
	l.retried(t)
	again, started, err := st.StartExport(ctx, j, "", t0.Add(time.Hour), 0)
	if err != nil || started || again.Token != got.Token {
		t.Fatalf("a second start: %+v started=%v %v, want the first run %s", again, started, err, got.Token)
	}
	// The put of an account's export slot, lost the same way, holds one
	// slot, not two: with a cap of 2, a second run still starts.
	sl := loseReply("PutItem", true)
	st = newStore(t, clock, sl.option)
	for i, batch := range []string{"b1", "b2"} {
		if _, started, err := st.StartExport(ctx, store.ExportJob{AccountID: "acct-slots", BatchID: batch}, "", t0.Add(time.Hour), 2); err != nil || !started {
			t.Fatalf("run %d of 2 after a lost slot reply: started=%v %v", i+1, started, err)
		}
	}
	sl.retried(t)

	// A writer's claim of the run, and its finish, lost the same way:
	// the claim is the writer's (another's is still refused), and the
	// finish gives back the run's slot (a cap of 1 starts the next run).
	ul := loseReply("UpdateItem", false)
	st = newStore(t, clock, ul.option)
	run, _, err := st.StartExport(ctx, store.ExportJob{AccountID: "acct-claim", BatchID: "b1"}, "", t0.Add(time.Hour), 1)
	if err != nil {
		t.Fatal(err)
	}
	ul.armed.Store(true)
	if ok, err := st.ClaimExport(ctx, run, t0.Add(5*time.Minute)); err != nil || !ok {
		t.Fatalf("claim after a lost reply: %v %v", ok, err)
	}
	ul.retried(t)
	if ok, err := st.ClaimExport(ctx, run, t0.Add(5*time.Minute)); err != nil || ok {
		t.Fatalf("a second writer's claim: %v %v, want refused", ok, err)
	}
	ul.calls.Store(0)
	if err := st.FinishExport(ctx, run, false); err != nil {
		t.Fatalf("finish after a lost reply: %v", err)
	}
	ul.retried(t)
	if _, started, err := st.StartExport(ctx, store.ExportJob{AccountID: "acct-claim", BatchID: "b2"}, "", t0.Add(time.Hour), 1); err != nil || !started {
		t.Fatalf("the next run after a finish whose reply was lost: started=%v %v", started, err)
	}
}
