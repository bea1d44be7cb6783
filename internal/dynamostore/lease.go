package dynamostore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Leases on MX hosts (sqsqueue.HostLeases): every worker invocation asks
// for one before it opens SMTP sessions to a host, so the per-host limit
// holds across all of them, not only inside one process.
//
// A host has `slots` lease records in the Batches table, in a partition of
// their own, "~mx#<host>", sort key the slot number: no account ID starts
// with "~" and no batch record lacks a state, so no reader of batches ever
// sees them, and each host's leases are in their own partition. A slot is
// taken with a conditional put (free, or its lease expired) and given back
// with a delete conditional on the taker's token. An expired lease is
// taken over, so a crashed invocation holds a host for ttl at most; ttl
// must outlast the longest holder (the worker function's timeout).

const (
	leasePartitionPrefix = "~mx#"
	attrLeaseUntil       = "leaseUntil"
	attrLeaseToken       = "leaseToken"
)

// AcquireHost takes a free lease on host among its slots, trying them in
// random order; ok is false when every slot is held.
func (s *Store) AcquireHost(ctx context.Context, host string, slots int, ttl time.Duration) (release func(), ok bool, err error) {
	token := newToken()
	first := rand.N(slots)
	for i := range slots {
		slot := strconv.Itoa((first + i) % slots)
		now := time.Now()
		key := item{attrAccountID: avS(leasePartitionPrefix + host), attrID: avS(slot)}
		rec := item{
			attrAccountID: key[attrAccountID], attrID: key[attrID],
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
			return nil, false, wrapErr("take an MX host lease", err)
		}
		return func() {
			// Best effort: a lease not deleted expires after ttl.
			_, _ = s.c.DeleteItem(context.WithoutCancel(ctx), &dynamodb.DeleteItemInput{
				TableName:                 aws.String(s.t.Batches),
				Key:                       key,
				ConditionExpression:       aws.String("#tk = :tk"),
				ExpressionAttributeNames:  map[string]string{"#tk": attrLeaseToken},
				ExpressionAttributeValues: item{":tk": avS(token)},
			})
		}, true, nil
	}
	return nil, false, nil
}
