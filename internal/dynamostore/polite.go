package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Politeness records (politeness.State, batch.Parking), in Batches table
// partitions starting with "~", keyed by "<provider>|<egress>":
//
//   - "~rate#<key>", sort key the window's start (epoch ms): the RCPT
//     commands reserved in that window, a counter raised with a
//     conditional ADD so that it never passes the limit.
//   - "~pause#<key>", sort key "pause": until when the provider is paused
//     after it throttled us, and how many pauses in a row (the back-off).
//   - "~park#<key>", sort key "<not-before, 13-digit epoch ms>#<random>":
//     work that waits for the provider, in the order it may run.
//   - "~parked", sort key the key: the keys that have parked work, for
//     the sweep, and when a wake message for the key is due.
//
// Every record carries a TTL, so nothing outlives its use.
const (
	ratePartitionPrefix  = "~rate#"
	pausePartitionPrefix = "~pause#"
	parkPartitionPrefix  = "~park#"
	parkedKeysPartition  = "~parked"

	attrRcpts       = "rcpts"
	attrPausedUntil = "pausedUntil"
	attrPauseLevel  = "pauseLevel"
	attrParkBody    = "body"
	attrWakeAt      = "wakeAt"

	pauseSortKey = "pause"
	// parkTTL outlasts any batch deadline that still lets parked work run.
	parkTTL = 72 * time.Hour
)

// ReserveRcpts reserves RCPT commands of key in the window of length
// window that holds now, keeping the window's count at limit or below:
// most if they fit, else what is left if that is least or more (the
// failed add returns the count, and the add of what is left is
// conditional on it staying). got is how many (0: none); next is when
// the next window starts.
func (s *Store) ReserveRcpts(ctx context.Context, key string, least, most, limit int, window time.Duration, now time.Time) (got int, next time.Time, err error) {
	start := now.Truncate(window)
	next = start.Add(window)
	n := min(most, limit)
	for range 3 { // a few tries: sessions of the key race for its room
		if n < max(least, 1) {
			break
		}
		_, err = s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(s.t.Batches),
			Key: item{
				attrAccountID: avS(ratePartitionPrefix + key),
				attrID:        avS(strconv.FormatInt(start.UnixMilli(), 10)),
			},
			UpdateExpression:                    aws.String("ADD #n :n SET #exp = :exp"),
			ConditionExpression:                 aws.String("attribute_not_exists(#n) OR #n <= :room"),
			ExpressionAttributeNames:            map[string]string{"#n": attrRcpts, "#exp": attrExpiresAt},
			ExpressionAttributeValues:           item{":n": avN(int64(n)), ":room": avN(int64(limit - n)), ":exp": ttlSeconds(next.Add(time.Hour))},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return n, next, nil
		}
		cf, ok := errors.AsType[*types.ConditionalCheckFailedException](err)
		if !ok {
			return 0, next, wrapErr("reserve RCPT commands", err)
		}
		n = min(n-1, limit-int(getN(item(cf.Item), attrRcpts)))
	}
	return 0, next, nil
}

func pauseKey(key string) item {
	return item{attrAccountID: avS(pausePartitionPrefix + key), attrID: avS(pauseSortKey)}
}

// PauseState implements politeness.State.
func (s *Store) PauseState(ctx context.Context, key string) (until time.Time, level int, err error) {
	out, err := s.c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.t.Batches), Key: pauseKey(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return time.Time{}, 0, wrapErr("read a provider pause", err)
	}
	return getTime(out.Item, attrPausedUntil), int(getN(out.Item, attrPauseLevel)), nil
}

// Pause pauses key after it throttled us at now, for length(pauses in a row
// so far), and returns the pause in force. A pause in force is not extended:
// the sessions under way when it began see the same throttling and must not
// stack their back-offs.
func (s *Store) Pause(ctx context.Context, key string, now time.Time, length func(level int) time.Duration) (until time.Time, err error) {
	for range 5 {
		cur, level, err := s.PauseState(ctx, key)
		if err != nil {
			return time.Time{}, err
		}
		if cur.After(now) {
			return cur, nil
		}
		d := length(level)
		until = now.Add(d)
		_, err = s.c.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.t.Batches),
			Item: item{
				attrAccountID: avS(pausePartitionPrefix + key), attrID: avS(pauseSortKey),
				attrPausedUntil: avTime(until), attrPauseLevel: avN(int64(level + 1)),
				attrExpiresAt: ttlSeconds(until.Add(2 * max(d, time.Hour))),
			},
			ConditionExpression:       aws.String("attribute_not_exists(#lvl) OR #lvl = :old"),
			ExpressionAttributeNames:  map[string]string{"#lvl": attrPauseLevel},
			ExpressionAttributeValues: item{":old": avN(int64(level))},
		})
		if isConditionFailed(err) {
			continue // another worker paused it meanwhile: read again
		}
		if err != nil {
			return time.Time{}, wrapErr("pause a provider", err)
		}
		return until, nil
	}
	return until, nil
}

// ClearPause implements politeness.State.
func (s *Store) ClearPause(ctx context.Context, key string, now time.Time) error {
	_, err := s.c.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.t.Batches),
		Key:                       pauseKey(key),
		ConditionExpression:       aws.String("#pu <= :now"),
		ExpressionAttributeNames:  map[string]string{"#pu": attrPausedUntil},
		ExpressionAttributeValues: item{":now": avTime(now)},
	})
	_, err = applied(err, "clear a provider pause")
	return err
}

// parkID is the sort key of parked work: by not-before, then at random.
func parkID(notBefore time.Time) string {
	return fmt.Sprintf("%013d#%s", max(notBefore.UnixMilli(), 0), newToken())
}

// Park implements batch.Parking.
func (s *Store) Park(ctx context.Context, key string, notBefore time.Time, body string) error {
	exp := ttlSeconds(notBefore.Add(parkTTL))
	_, err := s.c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.t.Batches), Item: item{
			attrAccountID: avS(parkPartitionPrefix + key), attrID: avS(parkID(notBefore)),
			attrParkBody: avS(body), attrExpiresAt: exp,
		}}},
		{Update: &types.Update{
			TableName:                 aws.String(s.t.Batches),
			Key:                       item{attrAccountID: avS(parkedKeysPartition), attrID: avS(key)},
			UpdateExpression:          aws.String("SET #exp = :exp"),
			ExpressionAttributeNames:  map[string]string{"#exp": attrExpiresAt},
			ExpressionAttributeValues: item{":exp": exp},
		}},
	}})
	return wrapErr("park work", err)
}

// TakeParked claims the oldest parked work of key that is due at now and
// returns it, with remove to call once it is queued. The claim is a
// conditional write with the taker's token, so of workers racing for one
// entry exactly one gets it, and a retried write (a lost reply) still
// finds it its own. An entry claimed but never removed (its taker died, or
// could not queue it) may be claimed again after claimFor.
func (s *Store) TakeParked(ctx context.Context, key string, now time.Time) (body string, remove func(), ok bool, err error) {
	due := fmt.Sprintf("%013d~", now.UnixMilli()) // "~" sorts after "#"
	token := newToken()
	out, err := s.c.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.t.Batches),
		KeyConditionExpression:    aws.String("#a = :pk AND #id <= :due"),
		ExpressionAttributeNames:  map[string]string{"#a": attrAccountID, "#id": attrID},
		ExpressionAttributeValues: item{":pk": avS(parkPartitionPrefix + key), ":due": avS(due)},
		ConsistentRead:            aws.Bool(true),
		Limit:                     aws.Int32(16),
	})
	if err != nil {
		return "", nil, false, wrapErr("list parked work", err)
	}
	for _, it := range out.Items {
		if getS(it, attrLeaseToken) != "" && getTime(it, attrLeaseUntil).After(now) {
			continue // claimed by a live taker
		}
		k := item{attrAccountID: it[attrAccountID], attrID: it[attrID]}
		upd, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.t.Batches),
			Key:                       k,
			UpdateExpression:          aws.String("SET #tk = :tk, #lu = :until"),
			ConditionExpression:       aws.String("attribute_exists(#id) AND (attribute_not_exists(#tk) OR #lu < :now OR #tk = :tk)"),
			ExpressionAttributeNames:  map[string]string{"#id": attrID, "#tk": attrLeaseToken, "#lu": attrLeaseUntil},
			ExpressionAttributeValues: item{":tk": avS(token), ":now": avTime(now), ":until": avTime(now.Add(claimFor))},
			ReturnValues:              types.ReturnValueAllNew,
		})
		if isConditionFailed(err) {
			continue // another worker took it
		}
		if err != nil {
			return "", nil, false, wrapErr("take parked work", err)
		}
		// Best effort: an entry not removed is queued again after
		// claimFor, which the worker's check for results makes harmless.
		return getS(upd.Attributes, attrParkBody), s.deleteIfToken(ctx, k, attrLeaseToken, token), true, nil
	}
	return "", nil, false, nil
}

// claimFor keeps other takers off claimed parked work, far longer than
// queueing one message takes.
const claimFor = 5 * time.Minute

// NextParked implements batch.Parking.
func (s *Store) NextParked(ctx context.Context, key string) (notBefore time.Time, ok bool, err error) {
	out, err := s.c.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.t.Batches),
		KeyConditionExpression:    aws.String("#a = :pk"),
		ExpressionAttributeNames:  map[string]string{"#a": attrAccountID},
		ExpressionAttributeValues: item{":pk": avS(parkPartitionPrefix + key)},
		ConsistentRead:            aws.Bool(true),
		Limit:                     aws.Int32(1),
	})
	if err != nil {
		return time.Time{}, false, wrapErr("list parked work", err)
	}
	if len(out.Items) == 0 {
		return time.Time{}, false, nil
	}
	ms, _, _ := strings.Cut(getS(out.Items[0], attrID), "#")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("dynamostore: parked work with a bad sort key %q", getS(out.Items[0], attrID))
	}
	return time.UnixMilli(n), true, nil
}

// ClaimWake records that a wake message for key is due at at and reports
// true to one caller, unless a wake at or before at is pending, so one wake
// per key and due time is sent. The caller's token keeps an SDK retry's
// claim the caller's.
func (s *Store) ClaimWake(ctx context.Context, key string, at, now time.Time) (bool, error) {
	_, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.t.Batches),
		Key:                       item{attrAccountID: avS(parkedKeysPartition), attrID: avS(key)},
		UpdateExpression:          aws.String("SET #w = :at, #tk = :tk, #exp = if_not_exists(#exp, :exp)"),
		ConditionExpression:       aws.String("attribute_not_exists(#w) OR #w <= :now OR #w > :at OR #tk = :tk"),
		ExpressionAttributeNames:  map[string]string{"#w": attrWakeAt, "#tk": attrLeaseToken, "#exp": attrExpiresAt},
		ExpressionAttributeValues: item{":at": avTime(at), ":now": avTime(now), ":tk": avS(newToken()), ":exp": ttlSeconds(at.Add(parkTTL))},
	})
	return applied(err, "schedule a wake")
}

// ParkedKeys lists the keys that had work parked in the last parkTTL.
func (s *Store) ParkedKeys(ctx context.Context) ([]string, error) {
	var keys []string
	err := s.query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.t.Batches),
		KeyConditionExpression:    aws.String("#a = :pk"),
		ExpressionAttributeNames:  map[string]string{"#a": attrAccountID},
		ExpressionAttributeValues: item{":pk": avS(parkedKeysPartition)},
	}, "list parked keys", func(it item) bool {
		keys = append(keys, getS(it, attrID))
		return true
	})
	return keys, err
}
