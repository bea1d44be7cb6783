package dynamostore

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/store"
)

// The address quota's counters (api.AddressQuota), and the
// Idempotency-Key limit's, whose periods are named "idempotency-keys/<day>":
// one item per account and period in the Batches table, partition
// "~quota#<accountId>", sort key the period ("2026-11"), like the MX
// leases (lease.go): no account ID starts with "~" and the item has no
// state, so no reader of batches sees it. It carries the TTL attribute, so old periods go away by themselves.
//
// A charge is one update that adds n on the condition that the counter
// is at most limit-n: DynamoDB evaluates the condition and the update
// atomically, so concurrent charges on any number of functions never take
// the counter past the limit, and a refused charge changes nothing.

const (
	quotaPartitionPrefix = "~quota#"
	attrQuotaUsed        = "used"
)

func quotaKey(accountID, period string) item {
	return item{attrAccountID: avS(quotaPartitionPrefix + accountID), attrID: avS(period)}
}

// ChargeAddresses adds n to the account's counter for period if it stays
// within limit; see api.AddressQuota.
//
// A counter's ADD is not idempotent: a reply lost after DynamoDB applied
// it, retried, charges twice (seen under load, where the SDK retried a
// reset connection). So each charge writes, in the same transaction, a
// marker item named by a token of its own; the SDK does not retry the
// transaction, this loop does, with the same token, and a retry that finds
// its marker knows the charge is already made.
func (s *Store) ChargeAddresses(ctx context.Context, accountID, period string, n, limit int, expires time.Time) (bool, error) {
	if n > limit {
		return false, nil // even an unused quota cannot take it
	}
	key := quotaKey(accountID, period)
	// "~" sorts the markers after every period, out of Counters' ranges.
	marker := item{attrAccountID: key[attrAccountID], attrID: avS("~charge#" + period + "#" + uuid.NewString()), attrExpiresAt: ttlSeconds(expires)}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.t.Batches), Item: marker,
			ConditionExpression: aws.String("attribute_not_exists(#id)"), ExpressionAttributeNames: map[string]string{"#id": attrID}}},
		{Update: &types.Update{TableName: aws.String(s.t.Batches), Key: key,
			UpdateExpression:          aws.String("ADD #used :n SET #exp = :exp"),
			ConditionExpression:       aws.String("attribute_not_exists(#used) OR #used <= :max"),
			ExpressionAttributeNames:  map[string]string{"#used": attrQuotaUsed, "#exp": attrExpiresAt},
			ExpressionAttributeValues: item{":n": avN(int64(n)), ":max": avN(int64(limit - n)), ":exp": ttlSeconds(expires)}}},
	}}
	var err error
	for attempt := range chargeAttempts {
		if attempt > 0 && sleepCtx(ctx, time.Duration(attempt)*50*time.Millisecond) != nil {
			break
		}
		_, err = s.c.TransactWriteItems(ctx, in, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
		if err == nil {
			return true, nil
		}
		if failed, ok := conditionFailures(err); ok {
			// The marker exists: an earlier attempt of this charge was
			// applied. Otherwise the counter's condition refused it.
			return failed[0], nil
		}
	}
	return false, wrapErr("charge the address quota", err)
}

// chargeAttempts bounds the tries of one charge.
const chargeAttempts = 4

// RefundAddresses takes n back off the account's counter for period, never
// below 0 (a counter cannot owe addresses, as on SQLite); a counter that is
// gone (expired) is left gone. Taking n is conditional on the counter
// holding n; when it holds less it is set to 0 on the condition that it
// still does, and a charge in between makes the loop try again.
func (s *Store) RefundAddresses(ctx context.Context, accountID, period string, n int) error {
	values := item{":n": avN(int64(n))}
	for range writeAttempts {
		_, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.t.Batches),
			Key:                       quotaKey(accountID, period),
			UpdateExpression:          aws.String("SET #used = #used - :n"),
			ConditionExpression:       aws.String("#used >= :n"),
			ExpressionAttributeNames:  map[string]string{"#used": attrQuotaUsed},
			ExpressionAttributeValues: values,
		})
		if !isConditionFailed(err) {
			return wrapErr("refund the address quota", err)
		}
		_, err = s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.t.Batches),
			Key:                       quotaKey(accountID, period),
			UpdateExpression:          aws.String("SET #used = :zero"),
			ConditionExpression:       aws.String("#used < :n"),
			ExpressionAttributeNames:  map[string]string{"#used": attrQuotaUsed},
			ExpressionAttributeValues: item{":n": avN(int64(n)), ":zero": avN(0)},
		})
		if !isConditionFailed(err) {
			return wrapErr("refund the address quota", err)
		}
		// Neither: gone (a failed comparison with a missing attribute), or
		// charged up to n meanwhile.
		cur, err := s.get(ctx, s.t.Batches, quotaKey(accountID, period), "refund the address quota")
		if err != nil || cur == nil || cur[attrQuotaUsed] == nil {
			return err
		}
	}
	return store.Unavailable(errors.New("dynamostore: the address quota counter keeps changing"))
}

// Counters returns the account's counters whose period is in [from, to),
// by period: one Query of the account's quota partition.
func (s *Store) Counters(ctx context.Context, accountID, from, to string) (map[string]int, error) {
	out := map[string]int{}
	err := s.query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.t.Batches),
		KeyConditionExpression:    aws.String("#a = :a AND #id BETWEEN :from AND :to"),
		ExpressionAttributeNames:  map[string]string{"#a": attrAccountID, "#id": attrID},
		ExpressionAttributeValues: item{":a": avS(quotaPartitionPrefix + accountID), ":from": avS(from), ":to": avS(to)},
		ConsistentRead:            aws.Bool(true),
	}, "read the quota counters", func(it item) bool {
		if p := getS(it, attrID); p != to && it[attrQuotaUsed] != nil {
			out[p] = int(getN(it, attrQuotaUsed))
		}
		return true
	})
	return out, err
}
