// Package dynamostore is the DynamoDB implementation of store.Store, used by
// the Lambda functions; package store's contract suite runs it as it runs the
// SQLite store.
//
// # Tables
//
// Four tables, with the key schemas of template.yaml (Definitions), and one S3
// bucket (Tables.Inputs) holding each batch's distinct items as one object,
// written before its record (input.go):
//
//   - Keys (pk): accounts ("acct#<id>"), their unique name index
//     ("name#<name>"), keys ("key#<hash>") and their unique short-ID index
//     ("keyid#<id>"). An entity and its index entry are written in one
//     transaction with attribute_not_exists on both, so no name or key ID is
//     taken twice. CountAccounts and ListKeys Scan with a filter: admin
//     operations on a small table, not worth an index.
//   - Batches (accountId, id): one record per batch with its counters; also
//     each account's create lock (active.go), the MX host leases ("~mx#<host>",
//     lease.go) and the address quota's counters ("~quota#<accountId>",
//     quota.go). These have no state, so no batch reader sees them. Two sparse
//     keys-only indexes hold batch records alone: byCreated, the list
//     (listing.go), and byActive, the work in progress (sweep.go).
//   - Results (batchId, seq): one row per result. batchId is
//     "<accountId>#<id>#<seq/250>": accounts never share rows, and no key takes
//     more than 250 writes. Also the account result cache ("~cache#…",
//     resultcache.go) and the domain facts ("~domain#<domain>", domainfacts.go).
//   - Idempotency (scope): one record per Idempotency-Key scope.
//
// A record that expires carries expiresAt, the TTL attribute in epoch seconds
// (on all four tables; Keys items never carry it), rounded up so DynamoDB
// never deletes it early. TTL deletion can lag by days, so readers also
// compare expiresAtMs with the store's clock and treat an expired record as
// missing.
//
// # Creating a batch
//
// CreateBatch stores the items as one S3 object, then puts the batch record
// naming it with attribute_not_exists on its ID: a handful of calls whatever
// the size, and a crash at any step leaves no batch a reader can see (only an
// object the bucket's lifecycle rule removes). "Pending" is an item of the
// input without a result row; InputItems reads the input (in plan order,
// input.go) a chunk at a time, WithoutResults and FirstPending the results.
//
// # Writing results exactly once
//
// PutResults writes transactions of up to 99 result puts, each conditional on
// its row not existing, plus one update of the batch record that adds them to
// the counters, conditional on the batch being queued or running. So a result
// and its count are written together or not at all, and a final batch gets no
// results. When a transaction is cancelled because some rows already exist (a
// redelivered message, overlapping workers), the cancellation reasons name
// them; they are dropped and the rest retried, so nothing counts twice.
// TransactionConflict cancellations are retried with backoff.
//
// Atomicity is per transaction: a call that fails part-way has written (and
// counted) whole transactions only, and the retry writes the rest, so the
// counter invariants hold at every moment.
//
// Within one process, PutResults calls for the same batch wait for each other,
// since their transactions all update the batch record. (moto does not isolate
// concurrent transactions, so the contract suite's concurrent writers rely on
// this wait; across processes the conditions keep counts exact.)
//
// PutResults then completes the batch with one conditional update (queued or
// running, processed >= items), also after a call that wrote nothing new: that
// heals a crash between the last result and the completion.
//
// # Errors
//
// A failed condition becomes the documented store outcome (CodeNotFound,
// CodeInvalidState, ClaimIdempotency's results). Throttling, missing tables,
// network faults and other service errors are CodeUnavailable wrapping the
// cause; the AWS text stays in the wrapped error for logs, never in Message.
package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Tables names the tables and the input bucket: the configuration's.
type Tables = config.Tables

// Attribute names shared by several tables.
const (
	attrPK          = "pk"
	attrAccountID   = "accountId"
	attrID          = "id"
	attrBatchID     = "batchId"
	attrSeq         = "seq"
	attrScope       = "scope"
	attrExpiresAt   = "expiresAt"   // TTL, epoch seconds
	attrExpiresAtMs = "expiresAtMs" // exact expiry, epoch milliseconds
)

// Definitions returns the CreateTableInput of every table t names, with the
// key schemas of template.yaml and on-demand billing. CreateTables turns on TTL.
func Definitions(t Tables) []dynamodb.CreateTableInput {
	schema := func(hash, rng string) []types.KeySchemaElement {
		ks := []types.KeySchemaElement{{AttributeName: aws.String(hash), KeyType: types.KeyTypeHash}}
		if rng != "" {
			ks = append(ks, types.KeySchemaElement{AttributeName: aws.String(rng), KeyType: types.KeyTypeRange})
		}
		return ks
	}
	keys := types.Projection{ProjectionType: types.ProjectionTypeKeysOnly}
	var defs []dynamodb.CreateTableInput
	for _, d := range []struct {
		name, hash, rng string
		attrs           []string // each key attribute's name and type, the indexes' too
		indexes         []types.GlobalSecondaryIndex
	}{
		{t.Keys, attrPK, "", []string{attrPK, "S"}, nil},
		// The sparse indexes of listing.go and sweep.go.
		{t.Batches, attrAccountID, attrID, []string{attrAccountID, "S", attrID, "S", attrListKey, "S", attrActive, "S"}, []types.GlobalSecondaryIndex{
			{IndexName: aws.String(listIndex), KeySchema: schema(attrAccountID, attrListKey), Projection: &keys},
			{IndexName: aws.String(activeIndex), KeySchema: schema(attrActive, ""), Projection: &keys},
		}},
		{t.Results, attrBatchID, attrSeq, []string{attrBatchID, "S", attrSeq, "N"}, nil},
		{t.Idempotency, attrScope, "", []string{attrScope, "S"}, nil},
	} {
		if d.name == "" {
			continue
		}
		in := dynamodb.CreateTableInput{TableName: aws.String(d.name), BillingMode: types.BillingModePayPerRequest,
			KeySchema: schema(d.hash, d.rng), GlobalSecondaryIndexes: d.indexes}
		for i := 0; i < len(d.attrs); i += 2 {
			in.AttributeDefinitions = append(in.AttributeDefinitions,
				types.AttributeDefinition{AttributeName: aws.String(d.attrs[i]), AttributeType: types.ScalarAttributeType(d.attrs[i+1])})
		}
		defs = append(defs, in)
	}
	return defs
}

// tableWaitTimeout bounds CreateTables' wait for a table to become active.
const tableWaitTimeout = 5 * time.Minute

// CreateTables creates the tables t names (adding missing indexes to those
// that exist), waits until they are active and turns on TTL, as template.yaml
// does. Tests and `evs` use it; deployments get their tables from the template.
func CreateTables(ctx context.Context, c *dynamodb.Client, t Tables) error {
	defs := Definitions(t)
	existing := map[string]bool{}
	for i := range defs {
		_, err := c.CreateTable(ctx, &defs[i])
		if _, ok := errors.AsType[*types.ResourceInUseException](err); ok {
			existing[*defs[i].TableName] = true
		} else if err != nil {
			return wrapErr("create table "+*defs[i].TableName, err)
		}
	}
	waiter := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second
	})
	for _, d := range defs {
		if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: d.TableName}, tableWaitTimeout); err != nil {
			return wrapErr("wait for table "+*d.TableName, err)
		}
		if existing[*d.TableName] {
			if err := ensureIndexes(ctx, c, d); err != nil {
				return err
			}
		}
		_, err := c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
			TableName: d.TableName,
			TimeToLiveSpecification: &types.TimeToLiveSpecification{
				AttributeName: aws.String(attrExpiresAt),
				Enabled:       aws.Bool(true),
			},
		})
		// Enabling TTL twice is refused with a ValidationException.
		if err != nil && apiCode(err) != "ValidationException" {
			return wrapErr("enable TTL on "+*d.TableName, err)
		}
	}
	return nil
}

// Config is what New needs.
type Config struct {
	Client  *dynamodb.Client // its retryer handles throttling first
	Tables  Tables           // operations on an unnamed table fail
	Objects Objects          // the S3 client of the input bucket
	Presign Presigner        // signs export URLs
	Now     func() time.Time // hides expired records; nil means time.Now
}

// Store is the DynamoDB store. It is safe for concurrent use.
type Store struct {
	c       *dynamodb.Client
	t       Tables
	now     func() time.Time
	sleep   func(context.Context, time.Duration) error
	in      inputs
	presign Presigner
	// backfilled is set once this process has seen the index keys
	// backfilled (listing.go).
	backfilled atomic.Bool

	// putLocks serialize this process's PutResults calls per batch, striped
	// by hash; channels, so a waiter's deadline holds. DynamoDB would cancel
	// overlapping ones with TransactionConflict; waiting is cheaper.
	putLocks [64]chan struct{}
}

// New returns a store on the tables of cfg.
func New(cfg Config) *Store {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	s := &Store{c: cfg.Client, t: cfg.Tables, now: now, sleep: sleepCtx, in: inputs{o: cfg.Objects, bucket: cfg.Tables.Inputs}, presign: cfg.Presign}
	for i := range s.putLocks {
		s.putLocks[i] = make(chan struct{}, 1)
	}
	return s
}

// lockBatch takes the PutResults lock of the batch with row key rk, or
// gives up when ctx ends; it returns the unlock function.
func (s *Store) lockBatch(ctx context.Context, rk string) (func(), error) {
	h := fnv.New32a()
	h.Write([]byte(rk))
	l := s.putLocks[h.Sum32()%uint32(len(s.putLocks))]
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, store.Unavailable(fmt.Errorf("dynamostore: wait for the batch's writer: %w", ctx.Err()))
	}
}

// Close does nothing: the client holds no resources that need releasing.
func (s *Store) Close() error { return nil }

func sleepCtx(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// wrapErr turns a DynamoDB client error into a store error: coded errors
// pass through, request mistakes (a bug here) stay internal, and everything
// else is CodeUnavailable wrapping the cause.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*evs.Error](err); ok {
		return err
	}
	wrapped := fmt.Errorf("dynamostore: %s: %w", op, err)
	switch apiCode(err) {
	case "ValidationException", "SerializationException":
		return wrapped
	}
	return store.Unavailable(wrapped)
}

// apiCode returns the service's error code of err, or "".
func apiCode(err error) string {
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		return ae.ErrorCode()
	}
	return ""
}

// isConditionFailed tells whether a single-item write's condition failed.
func isConditionFailed(err error) bool {
	_, ok := errors.AsType[*types.ConditionalCheckFailedException](err)
	return ok
}

// applied tells whether a conditional write (err is its own) took effect:
// false, and no error, when its condition failed.
func applied(err error, op string) (bool, error) {
	if isConditionFailed(err) {
		return false, nil
	}
	return err == nil, wrapErr(op, err)
}

// Times are stored as epoch milliseconds, the SQLite store's precision.

type item = map[string]types.AttributeValue

// avS takes any string type, so typed values need no conversion.
func avS[S ~string](s S) types.AttributeValue { return &types.AttributeValueMemberS{Value: string(s)} }

func avN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func avBool(b bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: b} }

func avTime(t time.Time) types.AttributeValue { return avN(t.UnixMilli()) }

// ttlSeconds is the TTL attribute for an expiry at t: rounded up, so the
// record outlives its last readable millisecond.
func ttlSeconds(t time.Time) types.AttributeValue {
	return avN(int64(math.Ceil(float64(t.UnixMilli()) / 1000)))
}

func getS(it item, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func getN(it item, name string) int64 {
	if v, ok := it[name].(*types.AttributeValueMemberN); ok {
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err == nil {
			return n
		}
	}
	return 0
}

func getBool(it item, name string) bool {
	if v, ok := it[name].(*types.AttributeValueMemberBOOL); ok {
		return v.Value
	}
	return false
}

func getB(it item, name string) []byte {
	if v, ok := it[name].(*types.AttributeValueMemberB); ok {
		return v.Value
	}
	return nil
}

// getTime reads a millisecond time; a missing attribute is the zero time.
func getTime(it item, name string) time.Time {
	if _, ok := it[name]; !ok {
		return time.Time{}
	}
	return time.UnixMilli(getN(it, name)).UTC()
}

// Open returns a Store on the tables with LambdaConfig(getenv), and that
// configuration for the caller's other clients.
func Open(ctx context.Context, t Tables, getenv func(string) string) (*Store, aws.Config, error) {
	awsCfg, err := LambdaConfig(getenv)
	if err != nil {
		return nil, aws.Config{}, err
	}
	objects := S3(awsCfg)
	return New(Config{Client: dynamodb.NewFromConfig(awsCfg), Objects: objects, Presign: s3.NewPresignClient(objects),
		Tables: t, Now: time.Now}), awsCfg, nil
}

// LambdaConfig is the AWS configuration of a Lambda function's environment:
// AWS_REGION, the role's credentials and, in tests and SAM local,
// AWS_ENDPOINT_URL. It avoids config.LoadDefaultConfig, whose other
// credential sources (SSO, STS, shared files, IMDS) weigh on every zip; the
// operator tool (infra/evs) keeps the SDK's loader.
func LambdaConfig(getenv func(string) string) (aws.Config, error) {
	region := cmp.Or(getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"))
	id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY")
	switch {
	case region == "":
		return aws.Config{}, errors.New("dynamostore: AWS_REGION is not set (Lambda sets it for every function)")
	case id == "" || secret == "":
		return aws.Config{}, errors.New("dynamostore: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set (Lambda sets them from the function's role)")
	}
	cfg := aws.Config{
		Region:      region,
		Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(id, secret, getenv("AWS_SESSION_TOKEN"))),
	}
	if ep := getenv("AWS_ENDPOINT_URL"); ep != "" {
		cfg.BaseEndpoint = aws.String(ep)
	}
	return cfg, nil
}

// S3 returns an S3 client of cfg, path-style on a custom endpoint (a local
// server has no per-bucket host names).
func S3(cfg aws.Config) *s3.Client {
	return s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = cfg.BaseEndpoint != nil })
}
