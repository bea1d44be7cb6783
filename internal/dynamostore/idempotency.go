package dynamostore

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/store"
)

// Idempotency table attributes.
const (
	attrFingerprint = "fingerprint"
	attrState       = "state"
	attrLockedUntil = "lockedUntil"
	attrStatusCode  = "statusCode"
	attrHeaders     = "headers"
	attrBody        = "body"
	attrClaimToken  = "claimToken" // names the ClaimIdempotency call that wrote the record
	attrDoneToken   = "doneToken"  // names the CompleteIdempotency call that stored the reply
)

// claimAttempts bounds the rare loop of a claim that lost its record between
// the failed write and the read (released or expired in between).
const claimAttempts = 5

// ClaimIdempotency writes rec as an in-progress record on the condition that
// no live record of its scope exists (missing, expired, or a stale claim).
// Of concurrent claims exactly one wins; the losers read its record.
func (s *Store) ClaimIdempotency(ctx context.Context, rec idempotency.Record, now time.Time) (idempotency.Record, bool, error) {
	it := item{
		attrScope:       avS(rec.Scope),
		attrFingerprint: avS(rec.Fingerprint),
		attrState:       avS(idempotency.InProgress),
		attrLockedUntil: avTime(rec.LockedUntil),
		attrExpiresAtMs: avTime(rec.ExpiresAt),
		attrExpiresAt:   ttlSeconds(rec.ExpiresAt),
		// An SDK resend fails against the first attempt's record; the
		// token tells it from a concurrent request's.
		attrClaimToken: avS(newToken()),
	}
	for range claimAttempts {
		_, err := s.c.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.t.Idempotency),
			Item:      it,
			ConditionExpression: aws.String("attribute_not_exists(#sc) OR #exp <= :now OR " +
				"(#st = :inprogress AND #lu <= :now)"),
			ExpressionAttributeNames: map[string]string{
				"#sc": attrScope, "#exp": attrExpiresAtMs, "#st": attrState, "#lu": attrLockedUntil,
			},
			ExpressionAttributeValues: item{":now": avTime(now), ":inprogress": avS(idempotency.InProgress)},
			// The record that blocked the claim comes back with the
			// failure, so the caller's fingerprint check needs no second
			// read (and cannot read a record newer than the one that won).
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return idempotency.Record{}, true, nil
		}
		cf, ok := errors.AsType[*types.ConditionalCheckFailedException](err)
		if !ok {
			return idempotency.Record{}, false, wrapErr("claim idempotency record", err)
		}
		cur := item(cf.Item)
		if len(cur) == 0 {
			// An endpoint that does not return the old item: read it.
			if cur, err = s.get(ctx, s.t.Idempotency, item{attrScope: avS(rec.Scope)}, "read idempotency record"); err != nil {
				return idempotency.Record{}, false, err
			}
		}
		if cur == nil {
			continue
		}
		if getS(cur, attrClaimToken) == getS(it, attrClaimToken) {
			return idempotency.Record{}, true, nil
		}
		// The record that beat the write may itself have lapsed by now;
		// then it is claimable and the loop writes again.
		if existing := idemFrom(cur); existing.ExpiresAt.After(now) && (existing.State != idempotency.InProgress || existing.LockedUntil.After(now)) {
			return existing, false, nil
		}
	}
	return idempotency.Record{}, false, store.Unavailable(errors.New("dynamostore: idempotency record keeps changing"))
}

func idemFrom(it item) idempotency.Record {
	r := idempotency.Record{
		Scope:       getS(it, attrScope),
		Fingerprint: getS(it, attrFingerprint),
		State:       getS(it, attrState),
		LockedUntil: getTime(it, attrLockedUntil),
		ExpiresAt:   getTime(it, attrExpiresAtMs),
		StatusCode:  int(getN(it, attrStatusCode)),
		Body:        getB(it, attrBody),
	}
	if m, ok := it[attrHeaders].(*types.AttributeValueMemberM); ok {
		r.Headers = make(map[string]string, len(m.Value))
		for k := range m.Value {
			r.Headers[k] = getS(m.Value, k)
		}
	}
	return r
}

// CompleteIdempotency stores the reply on the in-progress record of scope
// and marks it done; without such a record it is CodeNotFound, so a reply is
// never stored twice.
func (s *Store) CompleteIdempotency(ctx context.Context, scope string, statusCode int, headers map[string]string, body []byte) error {
	// The token lets an SDK resend of a completion find the done record
	// its own.
	token := newToken()
	set := "SET #st = :done, #code = :code, #tok = :tok"
	names := map[string]string{"#st": attrState, "#code": attrStatusCode, "#tok": attrDoneToken}
	values := item{":done": avS(idempotency.Done), ":code": avN(int64(statusCode)), ":inprogress": avS(idempotency.InProgress), ":tok": avS(token)}
	if len(headers) > 0 {
		m := make(item, len(headers))
		for k, v := range headers {
			m[k] = avS(v)
		}
		set += ", #h = :h"
		names["#h"] = attrHeaders
		values[":h"] = &types.AttributeValueMemberM{Value: m}
	}
	// An empty body is left out rather than stored empty: reading it back
	// gives the same empty reply.
	if len(body) > 0 {
		set += ", #b = :b"
		names["#b"] = attrBody
		values[":b"] = &types.AttributeValueMemberB{Value: body}
	}
	_, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.t.Idempotency),
		Key:                       item{attrScope: avS(scope)},
		UpdateExpression:          aws.String(set),
		ConditionExpression:       aws.String("#st = :inprogress"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	if isConditionFailed(err) {
		if _, mine, err := s.mine(ctx, s.t.Idempotency, item{attrScope: avS(scope)}, attrDoneToken, token, "read idempotency record"); mine || err != nil {
			return err
		}
		return store.NoClaim()
	}
	return wrapErr("complete idempotency record", err)
}

// ReleaseIdempotency deletes the record of scope; a missing one is no error.
func (s *Store) ReleaseIdempotency(ctx context.Context, scope string) error {
	_, err := s.c.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(s.t.Idempotency),
		Key:       item{attrScope: avS(scope)},
	})
	return wrapErr("release idempotency record", err)
}
