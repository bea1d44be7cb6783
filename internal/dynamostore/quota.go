package dynamostore

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/store"
)

// The address quota's counters (api.AddressQuota), and the Idempotency-Key
// limit's (periods "idempotency-keys/<day>"): one item per account and
// period in the Batches table, partition "~quota#<accountId>", sort key the
// period ("2026-11"). It has no state, so no batch reader sees it, and a TTL.
//
// A charge is one update adding n on the condition that the counter is at
// most limit-n, so concurrent charges never pass the limit, and a refused
// charge changes nothing.

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
// An ADD is not idempotent: a retry after a lost reply charges twice (seen
// under load). So each charge writes, in the same transaction, a marker item
// named by its token; this loop, not the SDK, retries with the same token,
// and a retry that finds its marker knows the charge is made.
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
			// A marker means an earlier attempt was applied; else the
			// counter's condition refused it.
			return failed[0], nil
		}
	}
	return false, wrapErr("charge the address quota", err)
}

// chargeAttempts bounds the tries of one charge.
const chargeAttempts = 4

// RefundAddresses takes n back off the account's counter for period, never
// below 0, as on SQLite; an expired counter is left gone. Taking n is
// conditional on the counter holding n; else it is set to 0 on the condition
// that it still holds less, and a charge in between makes the loop retry.
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

// Counters returns the account's counters of periods in [from, to).
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

// A publishable key's calls (api.PublishableQuota) cost two writes of
// 1 WRU, not a transaction of two items (4 WRU) per counter: the client
// address's minute is one UpdateItem on an item of its own partition
// ("~quota#<account>#<counter>"), so a page's visitors spread over
// partitions; the key's minute, the publishable keys' share ("pk") and the
// address quota ("used") are one UpdateItem of the account's period item,
// where the key's minute is two attributes, its name and its count. No
// marker: a write the SDK retries after a lost reply may count one call
// twice, which a count of calls a minute and a quota of addresses bear.
const attrQuotaShare = "pk"

// CountCall adds one to the account's counter in window when it stays
// within limit, and tells whether it did.
func (s *Store) CountCall(ctx context.Context, accountID, counter, window string, limit int, expires time.Time) (bool, error) {
	_, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.t.Batches),
		Key:                       item{attrAccountID: avS(quotaPartitionPrefix + accountID + "#" + counter), attrID: avS(window)},
		UpdateExpression:          aws.String("ADD #used :one SET #exp = :exp"),
		ConditionExpression:       aws.String("attribute_not_exists(#used) OR #used < :limit"),
		ExpressionAttributeNames:  map[string]string{"#used": attrQuotaUsed, "#exp": attrExpiresAt},
		ExpressionAttributeValues: item{":one": avN(1), ":limit": avN(int64(limit)), ":exp": ttlSeconds(expires)},
	})
	return applied(err, "count a call")
}

// ChargePublishable charges c in one UpdateItem, or says which limit
// refused it. It first counts into the key's minute as stored; when the
// item holds an older minute, it starts the new one (so the first call of
// a minute costs one write more).
func (s *Store) ChargePublishable(ctx context.Context, c store.CallCharge) (refused string, err error) {
	if c.Limit > 0 && c.N > c.Share {
		return store.RefusedShare, nil // even an unused share cannot take it
	}
	names := map[string]string{"#kn": "kn_" + c.KeyID, "#km": "km_" + c.KeyID, "#exp": attrExpiresAt}
	values := item{":one": avN(1), ":per": avN(int64(c.PerKey)), ":exp": ttlSeconds(c.Expires)}
	add, quota := "", ""
	if c.Limit > 0 {
		names["#used"], names["#pk"] = attrQuotaUsed, attrQuotaShare
		values[":n"], values[":max"], values[":pmax"] = avN(int64(c.N)), avN(int64(c.Limit-c.N)), avN(int64(c.Share-c.N))
		add, quota = "#used :n, #pk :n", " AND (attribute_not_exists(#used) OR #used <= :max) AND (attribute_not_exists(#pk) OR #pk <= :pmax)"
	}
	// The same minute: count on. An older one (or none): start it.
	same := [2]string{"SET #exp = :exp ADD #kn :one", "#km = :m AND #kn < :per" + quota}
	fresh := [2]string{"SET #km = :m, #kn = :one, #exp = :exp", "(attribute_not_exists(#km) OR #km < :m)" + quota}
	if add != "" {
		same[0], fresh[0] = same[0]+", "+add, fresh[0]+" ADD "+add
	}
	key := quotaKey(c.AccountID, c.Period)
	for range writeAttempts {
		for _, e := range [][2]string{same, fresh} {
			values[":m"] = avS(c.Minute)
			vals := maps.Clone(values)
			if e == fresh {
				delete(vals, ":per") // DynamoDB refuses a value no expression uses
			}
			_, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(s.t.Batches), Key: key, UpdateExpression: aws.String(e[0]), ConditionExpression: aws.String(e[1]),
				ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			})
			cf, failed := errors.AsType[*types.ConditionalCheckFailedException](err)
			if !failed {
				return "", wrapErr("charge a publishable key's call", err)
			}
			old := item(cf.Item)
			switch m := getS(old, "km_"+c.KeyID); {
			case c.Limit > 0 && getN(old, attrQuotaUsed) > int64(c.Limit-c.N):
				return store.RefusedQuota, nil
			case c.Limit > 0 && getN(old, attrQuotaShare) > int64(c.Share-c.N):
				return store.RefusedShare, nil
			case m == c.Minute && getN(old, "kn_"+c.KeyID) >= int64(c.PerKey):
				return store.RefusedKey, nil
			case m > c.Minute:
				// Another function's clock is a little ahead: its
				// minute is the key's.
				c.Minute = m
			}
		}
	}
	return "", store.Unavailable(errors.New("dynamostore: a publishable key's counters keep changing"))
}

// RefundPublishable takes n back off the address quota and the
// publishable keys' share of period; best effort, as a refund is.
func (s *Store) RefundPublishable(ctx context.Context, accountID, period string, n int) error {
	_, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.t.Batches), Key: quotaKey(accountID, period),
		UpdateExpression:          aws.String("ADD #used :neg, #pk :neg"),
		ConditionExpression:       aws.String("#used >= :n AND #pk >= :n"),
		ExpressionAttributeNames:  map[string]string{"#used": attrQuotaUsed, "#pk": attrQuotaShare},
		ExpressionAttributeValues: item{":n": avN(int64(n)), ":neg": avN(int64(-n))},
	})
	_, err = applied(err, "refund a publishable key's charge")
	return err
}
