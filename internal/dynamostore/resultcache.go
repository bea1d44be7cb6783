package dynamostore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// The result cache: one item per account, normalised address and mode in
// the Results table, batchId "~cache#<accountId>#<mode>#<address>", seq 0,
// holding the decision in the stores' codec, expiresAtMs and the TTL. Account
// IDs and modes hold no "#", so no other entry or result row shares a key.
// Each entry is a partition of its own, so a batch's writes spread over the
// table. Until TTL deletes an entry, reads return it with its expiry for the
// caller to judge.

const cachePartitionPrefix = "~cache#"

func cacheKey(accountID string, mode evs.Mode, address string) item {
	return item{attrBatchID: avS(cachePartitionPrefix + accountID + "#" + string(mode) + "#" + address), attrSeq: avN(0)}
}

// CachedDecision returns the account's cached decision for the normalised
// address in mode, with address as its Email, and when it expires.
func (s *Store) CachedDecision(ctx context.Context, accountID string, mode evs.Mode, address string) (evs.Decision, time.Time, bool, error) {
	out, err := s.c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.t.Results), Key: cacheKey(accountID, mode, address)})
	if err != nil {
		return evs.Decision{}, time.Time{}, false, wrapErr("read the result cache", err)
	}
	if out.Item == nil {
		return evs.Decision{}, time.Time{}, false, nil
	}
	d, err := store.DecodeDecision(address, getB(out.Item, attrDecision))
	if err != nil {
		return evs.Decision{}, time.Time{}, false, err
	}
	return d, time.UnixMilli(getN(out.Item, attrExpiresAtMs)), true, nil
}

// cacheWriteBatch is BatchWriteItem's limit of puts per call.
const cacheWriteBatch = 25

// KeepDecisions writes entries to the account's cache, replacing those of
// the same address and mode, 25 to a BatchWriteItem.
func (s *Store) KeepDecisions(ctx context.Context, accountID string, entries []store.CacheEntry) error {
	for chunk := range slices.Chunk(entries, cacheWriteBatch) {
		var reqs []types.WriteRequest
		for _, e := range chunk {
			it := cacheKey(accountID, e.Decision.Mode, e.Decision.Normalized)
			it[attrDecision] = &types.AttributeValueMemberB{Value: store.AppendCached(nil, e.Decision)}
			it[attrExpiresAtMs], it[attrExpiresAt] = avTime(e.ExpiresAt), ttlSeconds(e.ExpiresAt)
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
		}
		if err := s.batchWrite(ctx, s.t.Results, reqs, "write the result cache", "puts"); err != nil {
			return err
		}
	}
	return nil
}

// batchWrite sends reqs (cacheWriteBatch at most) in one BatchWriteItem, and
// the unprocessed ones again after a back-off; kind names them in errors.
func (s *Store) batchWrite(ctx context.Context, table string, reqs []types.WriteRequest, op, kind string) error {
	for attempt := 0; len(reqs) > 0; attempt++ {
		if attempt > 8 {
			return wrapErr(op, fmt.Errorf("%d %s left unprocessed", len(reqs), kind))
		}
		if attempt > 0 {
			if err := s.sleep(ctx, time.Duration(50<<attempt)*time.Millisecond); err != nil {
				return err
			}
		}
		out, err := s.c.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
		if err != nil {
			return wrapErr(op, err)
		}
		reqs = out.UnprocessedItems[table]
	}
	return nil
}
