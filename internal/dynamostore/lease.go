package dynamostore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Session slots (politeness.State): a worker invocation takes one before it
// opens an SMTP session to a provider from an egress address, so the limit
// on concurrent sessions holds across all invocations.
//
// A key ("<provider>|<egress>") has `slots` lease records in the Batches
// table partition "~slot#<key>", sort key the slot number; they have no
// state, so no batch reader sees them. A slot is taken with a conditional
// put (free, or its lease expired) and given back with a delete conditional
// on the taker's token, so a crashed invocation holds one for ttl at most;
// ttl must outlast the worker function's timeout.

const (
	slotPartitionPrefix = "~slot#"
	attrLeaseUntil      = "leaseUntil"
	attrLeaseToken      = "leaseToken"
)

// AcquireSlot takes a free session slot of key among its slots, trying
// them in random order; ok is false when every slot is held.
func (s *Store) AcquireSlot(ctx context.Context, key string, slots int, ttl time.Duration) (release func(), ok bool, err error) {
	token := newToken()
	first := rand.N(slots)
	for i := range slots {
		slot := strconv.Itoa((first + i) % slots)
		now := time.Now()
		k := item{attrAccountID: avS(slotPartitionPrefix + key), attrID: avS(slot)}
		rec := item{
			attrAccountID: k[attrAccountID], attrID: k[attrID],
			attrLeaseUntil: avTime(now.Add(ttl)), attrLeaseToken: avS(token),
			attrExpiresAt: ttlSeconds(now.Add(ttl + time.Hour)),
		}
		_, err := s.c.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                 aws.String(s.t.Batches),
			Item:                      rec,
			ConditionExpression:       aws.String("attribute_not_exists(#id) OR #lu < :now OR #tk = :tk"),
			ExpressionAttributeNames:  map[string]string{"#id": attrID, "#lu": attrLeaseUntil, "#tk": attrLeaseToken},
			ExpressionAttributeValues: item{":now": avTime(now), ":tk": avS(token)},
		})
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return nil, false, wrapErr("take a session slot", err)
		}
		// Best effort: a lease not deleted expires after ttl.
		return s.deleteIfToken(ctx, k, attrLeaseToken, token), true, nil
	}
	return nil, false, nil
}

// deleteIfToken returns the release of a lease, lock or claim this caller
// took: it deletes item key if tokenAttr still holds token, so never one
// another took over. It runs even after ctx ends and ignores errors; every
// such item also expires.
func (s *Store) deleteIfToken(ctx context.Context, key item, tokenAttr, token string) func() {
	return func() {
		_, _ = s.c.DeleteItem(context.WithoutCancel(ctx), &dynamodb.DeleteItemInput{
			TableName:                 aws.String(s.t.Batches),
			Key:                       key,
			ConditionExpression:       aws.String("#tk = :tk"),
			ExpressionAttributeNames:  map[string]string{"#tk": tokenAttr},
			ExpressionAttributeValues: item{":tk": avS(token)},
		})
	}
}
