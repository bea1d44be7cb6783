package dynamostore

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// The limit on active batches per account (EVS_MAX_ACTIVE_BATCHES).
//
// Counting is exact: the account is the partition key, so a strongly
// consistent Query reads all its batch records as they are now (an index
// would be eventually consistent). Counting then creating is two steps, so
// an account's creations take turns under its create lock, an item of the
// same partition put with attribute_not_exists (or an expired lease), held
// while counting and putting the record. The input object is stored before,
// so a turn lasts a few round trips; a crash costs createLockTTL at most.
// A creation waits longer than that TTL (a dead holder's lease runs out
// first) and well inside the Lambda's 29 s: a dozen creations at once from
// one account take turns, each a few round trips, and a slow table must not
// turn the last of them into a 503. Waiters retry at random intervals so
// none loses every race to the lock's release.
const (
	createLockID      = "~create-lock" // batch IDs are UUIDs, so it never names a batch
	attrLockToken     = "lockToken"
	createLockTTL     = 10 * time.Second
	createLockWait    = 15 * time.Second
	createLockBackoff = 10 * time.Millisecond
)

// ActiveBatches counts the account's unexpired batches in state queued or
// running, and those being created now, with a consistent Query.
func (s *Store) ActiveBatches(ctx context.Context, accountID string) (int, error) {
	if accountID == "" {
		return 0, nil
	}
	now := s.now()
	n := 0
	err := pages(ctx, dynamodb.NewQueryPaginator(s.c, &dynamodb.QueryInput{
		TableName:              aws.String(s.t.Batches),
		KeyConditionExpression: aws.String("#a = :a"),
		FilterExpression:       aws.String("#exp > :now AND #st IN (:q, :r)"),
		ExpressionAttributeNames: map[string]string{
			"#a": attrAccountID, "#exp": attrExpiresAtMs, "#st": attrState,
		},
		ExpressionAttributeValues: item{
			":a": avS(accountID), ":now": avTime(now), ":q": avS(evs.StateQueued), ":r": avS(evs.StateRunning),
		},
		ConsistentRead: aws.Bool(true),
		Select:         types.SelectCount,
	}), "count active batches", func(out *dynamodb.QueryOutput) bool {
		n += int(out.Count)
		return true
	})
	return n, err
}

// CreateBatchWithin counts and creates under the account's create lock.
func (s *Store) CreateBatchWithin(ctx context.Context, b evs.Batch, items []evs.Item, maxActive int) error {
	if maxActive <= 0 {
		return s.CreateBatch(ctx, b, items)
	}
	key, err := s.storeInput(ctx, b, items)
	if err != nil {
		return err
	}
	unlock, err := s.lockCreates(ctx, b.AccountID)
	if err != nil {
		return err
	}
	defer unlock()
	n, err := s.ActiveBatches(ctx, b.AccountID)
	if err != nil {
		return err
	}
	if n >= maxActive {
		// The input object stays behind for the bucket's lifecycle rule.
		return evs.Errorf(evs.CodeRateLimited, store.ActiveBatchesFull, n)
	}
	return s.putBatch(ctx, b, items, key)
}

// lockCreates takes the create lock of a Batches partition (an account's
// batches or uploads), waiting while another creation holds it, and returns
// its release.
func (s *Store) lockCreates(ctx context.Context, partition string) (func(), error) {
	token := newToken()
	key := batchKey(partition, createLockID)
	deadline := time.Now().Add(createLockWait)
	for attempt := 0; ; attempt++ {
		now := s.now()
		_, err := s.c.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.t.Batches),
			Item: item{
				attrAccountID: avS(partition), attrID: avS(createLockID),
				attrLockedUntil: avTime(now.Add(createLockTTL)), attrLockToken: avS(token),
				attrExpiresAt: ttlSeconds(now.Add(time.Hour)),
			},
			ConditionExpression:       aws.String("attribute_not_exists(#id) OR #lu < :now OR #tk = :tk"),
			ExpressionAttributeNames:  map[string]string{"#id": attrID, "#lu": attrLockedUntil, "#tk": attrLockToken},
			ExpressionAttributeValues: item{":now": avTime(now), ":tk": avS(token)},
		})
		if err == nil {
			// Best effort: a lock not deleted expires after createLockTTL.
			return s.deleteIfToken(ctx, key, attrLockToken, token), nil
		}
		if !isConditionFailed(err) {
			return nil, wrapErr("lock batch creation", err)
		}
		if time.Now().After(deadline) {
			return nil, store.Unavailable(errors.New("dynamostore: the account's create lock stayed taken"))
		}
		backoff := min(createLockBackoff<<min(attempt, 5), 250*time.Millisecond)
		if err := s.sleep(ctx, backoff/2+rand.N(backoff/2+1)); err != nil {
			return nil, wrapErr("lock batch creation", err)
		}
	}
}
