package dynamostore

import (
	"context"
	"errors"
	"fmt"
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
// Batch IDs are not time-ordered (a keyed creation derives its ID), so the
// table's sort key cannot give the order. CreateBatch writes attrListKey,
// the creation time in zero-padded milliseconds then the ID, and the sparse
// index listIndex (hash accountId, range listKey) holds exactly the batch
// records: create locks, pauses and uploads in the same table have no
// listKey. The index projects the keys only: a batch record is updated with
// every hundred results, and an index holding its counters would take a
// write each time. A page reads the index, then the records themselves with
// consistent reads, which also makes counters and state exact; the index
// itself is eventually consistent, so a batch created a moment ago may be
// missing from a first page.
const (
	listIndex   = "byCreated"
	attrListKey = "listKey"
)

// Batch records written before an index existed lack its key: listKey
// (the batch list) or attrActive (the sweep's index of active work). The
// sweep gives them theirs with a Scan (backfill), repeated by each sweep
// until one finds nothing to write, which also catches a batch the previous
// version's functions made while the stack was updating; it then puts a
// marker item, so later sweeps read that one item instead (and a process
// that has seen it, nothing).
var backfillMarker = batchKey("~backfill", "indexes")

// listKey orders an account's batches: the creation time, padded so that
// strings sort as numbers (16 digits reach the year 318857), then the ID to
// break ties.
func listKey(p evs.BatchPos) string {
	return fmt.Sprintf("%016d#%s", p.CreatedAt.UnixMilli(), p.ID)
}

// ListBatches returns a page of the account's live batches, newest first.
func (s *Store) ListBatches(ctx context.Context, accountID string, after evs.BatchPos, limit int) ([]evs.Batch, error) {
	if accountID == "" || limit <= 0 {
		return nil, nil // no batch has an empty account
	}
	in := &dynamodb.QueryInput{
		TableName:                aws.String(s.t.Batches),
		IndexName:                aws.String(listIndex),
		KeyConditionExpression:   aws.String("#a = :a"),
		ExpressionAttributeNames: map[string]string{"#a": attrAccountID},
		ExpressionAttributeValues: item{
			":a": avS(accountID),
		},
		ScanIndexForward: aws.Bool(false),
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
		// BatchGetItem answers in any order: put the page's back in the
		// index's.
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

// getAll reads the records of keys in table with strongly consistent
// reads, keysPerGet to a call, retrying unprocessed keys; proj, when set,
// names the attributes to read. The records come in no particular order,
// and a key with no record has none.
func (s *Store) getAll(ctx context.Context, table string, keys []item, proj *projection, op string) ([]item, error) {
	var out []item
	for rest := keys; len(rest) > 0; {
		chunk := rest[:min(keysPerGet, len(rest))]
		rest = rest[len(chunk):]
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

// backfill runs backfillIndexes until one finds nothing to write, then
// marks the table done. Best effort: a failure leaves it to the next sweep.
func (s *Store) backfill(ctx context.Context) {
	if s.backfilled.Load() {
		return
	}
	if it, err := s.get(ctx, s.t.Batches, backfillMarker, "read backfill marker"); err != nil || it != nil {
		s.backfilled.Store(it != nil)
		return
	}
	if n, err := s.backfillIndexes(ctx); err != nil || n > 0 {
		return
	}
	_, err := s.c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.t.Batches), Item: backfillMarker})
	s.backfilled.Store(err == nil)
}

// backfillIndexes gives every visible batch record the index keys it
// lacks, and returns how many it wrote. The write is conditional on the
// record still existing, so it never resurrects a deleted one.
func (s *Store) backfillIndexes(ctx context.Context) (int, error) {
	p := dynamodb.NewScanPaginator(s.c, &dynamodb.ScanInput{
		TableName:                 aws.String(s.t.Batches),
		FilterExpression:          aws.String("#exp > :now AND attribute_exists(#st) AND (attribute_not_exists(#lk) OR attribute_not_exists(#act))"),
		ExpressionAttributeNames:  map[string]string{"#exp": attrExpiresAtMs, "#st": attrState, "#lk": attrListKey, "#act": attrActive},
		ExpressionAttributeValues: item{":now": avTime(s.now())},
	})
	n := 0
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return n, wrapErr("backfill batch index keys", err)
		}
		for _, it := range page.Items {
			_, hasList := it[attrListKey]
			if hasList && !hasWork(it) {
				continue // in no index it lacks
			}
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
				return n, err
			} else if ok {
				n++
			}
		}
	}
	return n, nil
}

// ensureIndexes adds to the existing table of def the global secondary
// indexes it lacks (a table created before the index existed), and waits
// until every index of the table is active: a Query on an index still
// being built fails.
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
