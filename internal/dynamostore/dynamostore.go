// Package dynamostore is the DynamoDB implementation of store.Store, used by
// the Lambda functions. It passes the same contract suite as the embedded
// SQLite store: package store's tests run it against both.
//
// # Tables
//
// Four tables, with the key schemas of template.yaml (Definitions):
//
//   - Keys (pk): one table for accounts and keys. "acct#<id>" holds an
//     account, "name#<name>" the unique name index pointing at it, "key#<hash>"
//     a key and "keyid#<id>" the unique short-ID index pointing at its hash.
//     Each entity and its index entry are written in one TransactWriteItems
//     with attribute_not_exists on both, so a name or key ID is never taken
//     twice. CountAccounts and ListKeys Scan the table with a filter: they are
//     admin operations (first start, `evs keys list`) on a small table, not
//     worth a secondary index.
//   - Batches (accountId, id): one record per batch with its counters; also
//     each account's create lock (active.go), the MX host leases, in
//     partitions "~mx#<host>" (lease.go), and the address quota's counters,
//     in partitions "~quota#<accountId>" (quota.go). None has a state, so
//     no reader of batches sees them. Two sparse keys-only indexes hold
//     batch records alone: byCreated, the list (listing.go), and byActive,
//     the work in progress the sweep reads (sweep.go).
//   - Results (batchId, seq): one row per result of a batch, written with
//     the result. batchId is "<accountId>#<id>#<seq/250>": two accounts'
//     batches never share rows, and no key takes more than 250 writes.
//     Also the account result cache, in partitions "~cache#…"
//     (resultcache.go), and the domain facts, in partitions
//     "~domain#<domain>" (domainfacts.go).
//
// And one S3 bucket (Tables.Inputs): each batch's distinct items as one
// object, written before its record (input.go).
//   - Idempotency (scope): one record per Idempotency-Key scope.
//
// Every record that expires carries expiresAt in epoch seconds, the TTL
// attribute (enabled on all four tables, as in template.yaml; Keys items
// never carry it), rounded up so DynamoDB never deletes a record before it expires.
// TTL deletion is lazy (it can lag by days), so readers also compare the
// millisecond expiry (expiresAtMs) with the store's clock and treat an expired
// record as missing.
//
// # Creating a batch
//
// CreateBatch stores the items as one S3 object, then puts the batch record,
// naming the object, with attribute_not_exists on its ID: a handful of calls
// whatever the batch's size, and a crash at any step leaves no batch a
// reader can see (only an object the bucket's lifecycle rule removes).
// "Pending" is an item of the input without a result row; PendingItems reads
// the input a chunk at a time and the results keys covering it.
//
// # Writing results exactly once
//
// PutResults writes results in TransactWriteItems of up to 99 result puts
// plus one update of the batch record. Each result put is conditional on
// its row not existing yet; the batch update adds the transaction's
// results to the counters and is conditional on the batch being queued or
// running. So a result and its count are written together or not at all, and
// results for a final batch are never written. When a transaction is
// cancelled because some results were already written (a redelivered SQS
// message, or two workers overlapping), the cancellation reasons name them;
// they are dropped and the rest retried, so nothing is counted twice.
// Cancellations caused by concurrent transactions on the same batch record
// (TransactionConflict) are retried with backoff.
//
// Atomicity is per transaction, not per call: a call of more than 99
// results that fails part-way has written (and counted) whole transactions
// only, and the caller's retry writes the rest without counting anything
// twice, so the counter invariants hold at every moment.
//
// Within one process, PutResults calls for the same batch wait for each
// other: their transactions all update the batch record, which DynamoDB
// would cancel with TransactionConflict if they overlapped. (moto, which the
// tests run against, does not isolate concurrent transactions at all, so
// the contract suite's concurrent writers rely on this wait there; across
// processes the transactions' conditions are what keeps counts exact.)
//
// After its transactions, PutResults completes the batch with one conditional
// update (queued or running, and processed >= items). Doing it after every
// call, also one that wrote nothing new, heals a crash between the last
// result and the completion: the redelivered message completes the batch.
//
// # Errors
//
// A failed condition becomes the documented store outcome (CodeNotFound,
// CodeInvalidState, or the return values of ClaimIdempotency). Throttling,
// missing tables, network faults and other service errors are *evs.Error
// CodeUnavailable wrapping the cause; the AWS text stays in the wrapped error
// for logs and never reaches clients through the error's Message.
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

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Tables names the four tables. An empty name means the table is not used
// (the `evs keys` command only needs Keys). config.Tables converts to it.
type Tables struct {
	Keys        string
	Batches     string
	Results     string
	Idempotency string
	// Inputs is the S3 bucket of batch inputs (and uploads).
	Inputs string
}

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

// Definitions returns the CreateTableInput of every table t names (empty
// names are left out), with the key schemas of template.yaml and on-demand
// billing. Time-to-live is not part of CreateTableInput; CreateTables turns
// it on.
func Definitions(t Tables) []dynamodb.CreateTableInput {
	var defs []dynamodb.CreateTableInput
	add := func(name string, hash, hashType string, rng, rngType string) {
		if name == "" {
			return
		}
		in := dynamodb.CreateTableInput{
			TableName:   aws.String(name),
			BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{
				{AttributeName: aws.String(hash), AttributeType: types.ScalarAttributeType(hashType)},
			},
			KeySchema: []types.KeySchemaElement{{AttributeName: aws.String(hash), KeyType: types.KeyTypeHash}},
		}
		if rng != "" {
			in.AttributeDefinitions = append(in.AttributeDefinitions,
				types.AttributeDefinition{AttributeName: aws.String(rng), AttributeType: types.ScalarAttributeType(rngType)})
			in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String(rng), KeyType: types.KeyTypeRange})
		}
		defs = append(defs, in)
	}
	add(t.Keys, attrPK, "S", "", "")
	add(t.Batches, attrAccountID, "S", attrID, "S")
	if t.Batches != "" {
		// The sparse indexes of the batch list (listing.go) and of active
		// work (sweep.go), keys only.
		b := &defs[len(defs)-1]
		keys := types.Projection{ProjectionType: types.ProjectionTypeKeysOnly}
		b.AttributeDefinitions = append(b.AttributeDefinitions,
			types.AttributeDefinition{AttributeName: aws.String(attrListKey), AttributeType: types.ScalarAttributeTypeS},
			types.AttributeDefinition{AttributeName: aws.String(attrActive), AttributeType: types.ScalarAttributeTypeS})
		b.GlobalSecondaryIndexes = []types.GlobalSecondaryIndex{{
			IndexName: aws.String(listIndex),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(attrAccountID), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(attrListKey), KeyType: types.KeyTypeRange},
			},
			Projection: &keys,
		}, {
			IndexName:  aws.String(activeIndex),
			KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String(attrActive), KeyType: types.KeyTypeHash}},
			Projection: &keys,
		}}
	}
	add(t.Results, attrBatchID, "S", attrSeq, "N")
	add(t.Idempotency, attrScope, "S", "", "")
	return defs
}

// tableWaitTimeout bounds how long CreateTables waits for a table to become
// active; on-demand tables usually take seconds.
const tableWaitTimeout = 5 * time.Minute

// CreateTables creates the tables t names (skipping empty names and tables
// that already exist, to which it adds the indexes they lack), waits until
// they are active and turns on time-to-live on expiresAt, as template.yaml
// does. Tests and `evs` use it;
// deployments get their tables from the template.
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
		// Enabling TTL twice is refused with a ValidationException; the
		// table is then already as wanted.
		if err != nil && apiCode(err) != "ValidationException" {
			return wrapErr("enable TTL on "+*d.TableName, err)
		}
	}
	return nil
}

// Config is what New needs.
type Config struct {
	// Client is the DynamoDB client; its retryer handles throttling first.
	Client *dynamodb.Client
	// Tables names the tables and the input bucket; operations on an
	// unnamed table fail.
	Tables Tables
	// Objects is the S3 client of the input bucket; creating a batch
	// with items needs it. Presign signs export URLs (Export).
	Objects Objects
	Presign Presigner
	// Now is the store's clock, used to hide expired records; nil means
	// time.Now.
	Now func() time.Time
}

// Store is the DynamoDB store. It is safe for concurrent use.
type Store struct {
	c     *dynamodb.Client
	t     Tables
	now   func() time.Time
	sleep func(context.Context, time.Duration) error
	in    inputs
	// presign signs export download URLs.
	presign Presigner
	// backfilled is set once this process has seen the table's index keys
	// backfilled (listing.go).
	backfilled atomic.Bool

	// putLocks serialize this process's PutResults calls per batch (striped
	// by a hash of the batch key; a channel so a waiter's deadline holds).
	// Their transactions all update the batch record, so DynamoDB would
	// cancel concurrent ones with TransactionConflict anyway; waiting here
	// is cheaper than retrying.
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

// wrapErr turns an error of the DynamoDB client into a store error: coded
// errors pass through, request mistakes (a bug here, not a fault of the
// service) stay internal, and everything else — throttling, missing tables,
// network faults, deadlines — is CodeUnavailable wrapping the cause.
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

// isConditionFailed tells whether err is a failed ConditionExpression of a
// single-item write.
func isConditionFailed(err error) bool {
	var cf *types.ConditionalCheckFailedException
	return errors.As(err, &cf)
}

// applied tells whether a conditional write (err is its own) took effect:
// false, and no error, when its condition failed.
func applied(err error, op string) (bool, error) {
	if isConditionFailed(err) {
		return false, nil
	}
	return err == nil, wrapErr(op, err)
}

// Attribute value helpers. Times are stored as epoch milliseconds, the
// precision the contract suite and the SQLite store keep.

type item = map[string]types.AttributeValue

// avS takes any string type, so typed domain values (states, modes) need no
// conversion at every call.
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

// Open returns a Store on the tables with the AWS configuration of a Lambda
// function's environment, read with getenv (LambdaConfig), and that configuration, for the
// caller's other clients.
func Open(ctx context.Context, t Tables, getenv func(string) string) (*Store, aws.Config, error) {
	awsCfg, err := LambdaConfig(getenv)
	if err != nil {
		return nil, aws.Config{}, err
	}
	objects := S3(awsCfg)
	return New(Config{Client: dynamodb.NewFromConfig(awsCfg), Objects: objects, Presign: s3.NewPresignClient(objects),
		Tables: t, Now: time.Now}), awsCfg, nil
}

// LambdaConfig is the AWS configuration a Lambda function's environment
// gives: the region (AWS_REGION), the execution role's credentials
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) and, in
// tests and under SAM local, AWS_ENDPOINT_URL. It is built here rather than
// by the SDK's config.LoadDefaultConfig because that links every other
// credential source (SSO, STS, shared files, IMDS), about 190 KB of each
// zipped function that Lambda never uses: the worker's zip went over
// 5 MiB with them. The operator tool (infra/evs), run by people with
// profiles and SSO, keeps the SDK's loader.
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

// S3 returns an S3 client of cfg. An endpoint of its own (a local AWS-API
// server, as in the tests) is addressed path-style: such a server has no
// per-bucket host names.
func S3(cfg aws.Config) *s3.Client {
	return s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = cfg.BaseEndpoint != nil })
}
