package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Listing an account's batches newest first (GET /v1/requests).
//
// Batch IDs are not time-ordered (a keyed creation derives its ID), so
// CreateBatch writes attrListKey, the creation time in zero-padded
// milliseconds then the ID, and the sparse index listIndex (accountId,
// listKey) holds exactly the batch records. It projects keys only: a batch
// record is updated every hundred results, and an index holding counters
// would take a write each time. A page reads the index, then the records
// with consistent reads, so counters and state are exact; the index is
// eventually consistent, so a brand-new batch may miss a first page.
const (
	listIndex   = "byCreated"
	attrListKey = "listKey"
)

// Batch records written before an index existed lack its key. The sweeps
// give them theirs with a Scan, repeated until a pass writes nothing (which
// catches batches the previous version made during the update), each sweep
// spending backfillBudget at most; the marker item keeps the place, then
// says it is done.
var backfillBudget = time.Minute

var backfillMarker = batchKey("~backfill", "indexes")

const attrBackfillCursor, attrBackfillWrote, attrBackfillDone = "cursor", "wrote", "done"

// listKey orders an account's batches: the creation time, padded to sort as
// a number (16 digits reach the year 318857), then the ID.
func listKey(p evs.BatchPos) string {
	return fmt.Sprintf("%016d#%s", p.CreatedAt.UnixMilli(), p.ID)
}

// ListBatches returns a page of the account's live batches, newest first.
func (s *Store) ListBatches(ctx context.Context, accountID string, after evs.BatchPos, limit int) ([]evs.Batch, error) {
	if accountID == "" || limit <= 0 {
		return nil, nil // no batch has an empty account
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.t.Batches),
		IndexName:                 aws.String(listIndex),
		KeyConditionExpression:    aws.String("#a = :a"),
		ExpressionAttributeNames:  map[string]string{"#a": attrAccountID},
		ExpressionAttributeValues: item{":a": avS(accountID)},
		ScanIndexForward:          aws.Bool(false),
	}
	if !after.IsZero() {
		in.KeyConditionExpression = aws.String("#a = :a AND #k < :k")
		in.ExpressionAttributeNames["#k"] = attrListKey
		in.ExpressionAttributeValues[":k"] = avS(listKey(after))
	}
	var out []evs.Batch
	for {
		// Expired records stay in the index until TTL deletes them, so
		// one read may not fill the page.
		in.Limit = aws.Int32(int32(min(limit-len(out), keysPerGet)))
		page, err := s.c.Query(ctx, in)
		if err != nil {
			return nil, wrapErr("list batches", err)
		}
		keys := make([]item, len(page.Items))
		for i, it := range page.Items {
			keys[i] = batchKey(getS(it, attrAccountID), getS(it, attrID))
		}
		recs, err := s.getAll(ctx, s.t.Batches, keys, nil, "list batches")
		if err != nil {
			return nil, err
		}
		// BatchGetItem answers in any order: restore the index's.
		byID := make(map[string]item, len(recs))
		for _, r := range recs {
			byID[getS(r, attrID)] = r
		}
		for _, k := range keys {
			if r := byID[getS(k, attrID)]; s.visible(r) {
				out = append(out, batchFrom(r))
			}
		}
		if len(out) >= limit || len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// getAll reads the records of keys with strongly consistent reads,
// keysPerGet a call, retrying unprocessed keys; proj, when set, names the
// attributes. The records come in no particular order.
func (s *Store) getAll(ctx context.Context, table string, keys []item, proj *projection, op string) ([]item, error) {
	var out []item
	for chunk := range slices.Chunk(keys, keysPerGet) {
		ka := types.KeysAndAttributes{Keys: chunk, ConsistentRead: aws.Bool(true)}
		if proj != nil {
			ka.ProjectionExpression, ka.ExpressionAttributeNames = aws.String(proj.expr), proj.names
		}
		req := map[string]types.KeysAndAttributes{table: ka}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt == writeAttempts {
				return nil, store.Unavailable(fmt.Errorf("dynamostore: %s: keys still unprocessed after %d reads", op, attempt))
			}
			if attempt > 0 {
				if err := s.backoff(ctx, attempt-1); err != nil {
					return nil, wrapErr(op, err)
				}
			}
			res, err := s.c.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, wrapErr(op, err)
			}
			out = append(out, res.Responses[table]...)
			req = res.UnprocessedKeys
		}
	}
	return out, nil
}

// projection is a ProjectionExpression and its attribute names.
type projection struct {
	expr  string
	names map[string]string
}

// backfill goes on with the Scan where the last sweep left it until
// backfillBudget is spent; a failure leaves it to the next sweep.
func (s *Store) backfill(ctx context.Context) {
	if s.backfilled.Load() {
		return
	}
	m, err := s.get(ctx, s.t.Batches, backfillMarker, "read backfill marker")
	if err != nil || getBool(m, attrBackfillDone) {
		s.backfilled.Store(err == nil)
		return
	}
	var cursor item
	if c, ok := m[attrBackfillCursor].(*types.AttributeValueMemberM); ok {
		cursor = c.Value
	}
	wrote := getN(m, attrBackfillWrote)
	for stop := time.Now().Add(backfillBudget); ; {
		n, next, err := s.backfillPage(ctx, cursor)
		if err != nil {
			return
		}
		wrote += int64(n)
		rec := maps.Clone(backfillMarker)
		switch {
		case len(next) > 0:
			rec[attrBackfillCursor] = &types.AttributeValueMemberM{Value: next}
		case wrote == 0:
			rec[attrBackfillDone] = avBool(true)
		default:
			wrote = 0 // a pass with writes: another follows
		}
		rec[attrBackfillWrote], cursor = avN(wrote), next
		_, err = s.c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.t.Batches), Item: rec})
		if _, done := rec[attrBackfillDone]; err != nil || done || time.Now().After(stop) {
			s.backfilled.Store(err == nil && done)
			return
		}
	}
}

// backfillPage gives each visible batch record of the Scan's page at cursor
// (nil: the start) the index keys it lacks, conditional on the record still
// existing, and returns how many it wrote and the next cursor (empty: none).
func (s *Store) backfillPage(ctx context.Context, cursor item) (int, item, error) {
	page, err := s.c.Scan(ctx, &dynamodb.ScanInput{
		TableName: aws.String(s.t.Batches),
		// Lacking listKey, or attrActive with work (hasWork).
		FilterExpression: aws.String("#exp > :now AND attribute_exists(#st) AND " +
			"(attribute_not_exists(#lk) OR attribute_not_exists(#act) AND (#st IN (:q, :r) OR #cs = :p))"),
		ExpressionAttributeNames: map[string]string{"#exp": attrExpiresAtMs, "#st": attrState, "#lk": attrListKey, "#act": attrActive, "#cs": attrCBState},
		ExpressionAttributeValues: item{":now": avTime(s.now()), ":q": avS(evs.StateQueued), ":r": avS(evs.StateRunning),
			":p": avS(evs.CallbackPending)},
		ExclusiveStartKey: cursor,
	})
	if err != nil {
		return 0, nil, wrapErr("backfill batch index keys", err)
	}
	n := 0
	for _, it := range page.Items {
		names := map[string]string{"#st": attrState, "#lk": attrListKey}
		values := item{":lk": avS(listKey(evs.BatchPos{CreatedAt: getTime(it, attrCreatedAt), ID: getS(it, attrID)}))}
		update := "SET #lk = if_not_exists(#lk, :lk)"
		if hasWork(it) {
			update += ", #act = :act"
			names["#act"], values[":act"] = attrActive, activeValue
		}
		_, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(s.t.Batches), Key: batchKey(getS(it, attrAccountID), getS(it, attrID)),
			UpdateExpression: aws.String(update), ConditionExpression: aws.String("attribute_exists(#st)"),
			ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		})
		if ok, err := applied(err, "backfill batch index keys"); err != nil {
			return n, nil, err
		} else if ok {
			n++
		}
	}
	return n, page.LastEvaluatedKey, nil
}

// ensureIndexes adds to def's existing table the indexes it lacks and waits
// until every index is active: a Query on an index being built fails.
func ensureIndexes(ctx context.Context, c *dynamodb.Client, def dynamodb.CreateTableInput) error {
	if len(def.GlobalSecondaryIndexes) == 0 {
		return nil
	}
	deadline := time.Now().Add(tableWaitTimeout)
	for {
		out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: def.TableName})
		if err != nil {
			return wrapErr("describe table "+*def.TableName, err)
		}
		have := map[string]types.IndexStatus{}
		for _, g := range out.Table.GlobalSecondaryIndexes {
			have[aws.ToString(g.IndexName)] = g.IndexStatus
		}
		var missing []types.GlobalSecondaryIndexUpdate
		busy := false
		for _, g := range def.GlobalSecondaryIndexes {
			st, ok := have[*g.IndexName]
			switch {
			case !ok:
				missing = append(missing, types.GlobalSecondaryIndexUpdate{Create: &types.CreateGlobalSecondaryIndexAction{
					IndexName: g.IndexName, KeySchema: g.KeySchema, Projection: g.Projection,
				}})
			case st != "" && st != types.IndexStatusActive:
				busy = true
			}
		}
		if len(missing) == 0 && !busy {
			return nil
		}
		if len(missing) > 0 {
			// One index per UpdateTable call is what DynamoDB allows.
			// The table's definitions and the new index's keys': DynamoDB
			// refuses one no key uses.
			attrs := out.Table.AttributeDefinitions
			for _, a := range def.AttributeDefinitions {
				if slices.ContainsFunc(missing[0].Create.KeySchema, func(k types.KeySchemaElement) bool { return *k.AttributeName == *a.AttributeName }) &&
					!slices.ContainsFunc(attrs, func(b types.AttributeDefinition) bool { return *b.AttributeName == *a.AttributeName }) {
					attrs = append(attrs, a)
				}
			}
			_, err := c.UpdateTable(ctx, &dynamodb.UpdateTableInput{
				TableName: def.TableName, AttributeDefinitions: attrs, GlobalSecondaryIndexUpdates: missing[:1],
			})
			if err != nil && apiCode(err) != "ResourceInUseException" {
				return wrapErr("add an index to "+*def.TableName, err)
			}
		}
		if time.Now().After(deadline) {
			return wrapErr("wait for the indexes of "+*def.TableName, errors.New("still not active"))
		}
		select {
		case <-ctx.Done():
			return wrapErr("wait for the indexes of "+*def.TableName, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
