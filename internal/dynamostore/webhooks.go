package dynamostore

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// A batch's webhook delivery lives on the batch record itself: the record
// that turns final is the record that holds the pending delivery, so the
// two are one write without touching the batch transitions. A delivery's
// attributes are written with the batch and take effect once it is final.
const (
	attrCBURL      = "cbUrl"
	attrCBState    = "cbState"
	attrCBAttempts = "cbAttempts"
	attrCBStatus   = "cbStatus"
	attrCBNext     = "cbNextMs"
	// attrCBToken names the call that last wrote the delivery, so an SDK
	// resend that fails against itself knows it.
	attrCBToken = "cbToken"
)

// Webhook secrets live in the Keys table under "whsec#<accountId>": the
// current secret and the retired ones as a JSON array of
// evs.RetiredSecret, newest first. A record written before retired secrets
// were kept as a list holds one in "previous", retired at "rotatedAt".
const (
	prefixSecret  = "whsec#"
	attrCurrent   = "current"
	attrRetired   = "retired"
	attrPrevious  = "previous"
	attrRotatedAt = "rotatedAt"
)

// addDelivery adds the delivery attributes of b to its new batch record.
func addDelivery(rec item, b evs.Batch) {
	if b.CallbackURL == "" {
		return
	}
	rec[attrCBURL] = avS(b.CallbackURL)
	rec[attrCBState] = avS(evs.CallbackPending)
	rec[attrCBAttempts] = avN(0)
	rec[attrCBStatus] = avN(0)
	rec[attrCBNext] = avN(0)
}

func deliveryFrom(it item) evs.Delivery {
	return evs.Delivery{
		AccountID:  getS(it, attrAccountID),
		BatchID:    getS(it, attrID),
		URL:        getS(it, attrCBURL),
		State:      evs.CallbackState(getS(it, attrCBState)),
		Attempts:   int(getN(it, attrCBAttempts)),
		LastStatus: int(getN(it, attrCBStatus)),
		NextAt:     getTime(it, attrCBNext),
	}
}

// Delivery returns the delivery of a live, final batch of account.
func (s *Store) Delivery(ctx context.Context, accountID, batchID string) (evs.Delivery, error) {
	it, err := s.batchItem(ctx, accountID, batchID)
	if err != nil && evs.ErrorCode(err) != evs.CodeNotFound {
		return evs.Delivery{}, err
	}
	if err != nil || getS(it, attrCBURL) == "" || !evs.State(getS(it, attrState)).Final() {
		return evs.Delivery{}, store.NoDelivery()
	}
	return deliveryFrom(it), nil
}

// ClaimDelivery starts the next attempt of a due delivery; see store.Webhooks.
func (s *Store) ClaimDelivery(ctx context.Context, accountID, batchID string, attempts int, now, leaseUntil time.Time) (evs.Delivery, error) {
	if accountID == "" || batchID == "" {
		return evs.Delivery{}, store.NoDelivery()
	}
	token := newToken()
	out, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.t.Batches),
		Key:              batchKey(accountID, batchID),
		UpdateExpression: aws.String("SET #n = :n, #next = :lease, #tok = :tok"),
		ConditionExpression: aws.String("attribute_exists(#url) AND #cs = :pending AND #n = :seen AND #next <= :now AND #exp > :now AND " +
			"#st IN (:completed, :cancelled, :failed)"),
		ExpressionAttributeNames: map[string]string{
			"#n": attrCBAttempts, "#next": attrCBNext, "#url": attrCBURL, "#cs": attrCBState,
			"#exp": attrExpiresAtMs, "#st": attrState, "#tok": attrCBToken,
		},
		ExpressionAttributeValues: item{
			":n": avN(int64(attempts + 1)), ":seen": avN(int64(attempts)), ":lease": avTime(leaseUntil),
			":now": avTime(now), ":pending": avS(evs.CallbackPending), ":tok": avS(token),
			":completed": avS(evs.StateCompleted), ":cancelled": avS(evs.StateCancelled), ":failed": avS(evs.StateFailed),
		},
		ReturnValues: "ALL_NEW",
	})
	if isConditionFailed(err) {
		if cur, mine, _ := s.mine(ctx, s.t.Batches, batchKey(accountID, batchID), attrCBToken, token, "read delivery"); mine {
			return deliveryFrom(cur), nil
		}
		return evs.Delivery{}, store.DeliveryNotDue()
	}
	if err != nil {
		return evs.Delivery{}, wrapErr("claim delivery", err)
	}
	return deliveryFrom(out.Attributes), nil
}

// RecordDelivery stores an attempt's outcome if it is still the latest.
func (s *Store) RecordDelivery(ctx context.Context, d evs.Delivery) error {
	if d.AccountID == "" || d.BatchID == "" {
		return store.NoDelivery()
	}
	token := newToken()
	_, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(s.t.Batches),
		Key:                 batchKey(d.AccountID, d.BatchID),
		UpdateExpression:    aws.String("SET #cs = :state, #code = :code, #next = :next, #tok = :tok"),
		ConditionExpression: aws.String("#cs = :pending AND #n = :n"),
		ExpressionAttributeNames: map[string]string{
			"#cs": attrCBState, "#code": attrCBStatus, "#next": attrCBNext, "#n": attrCBAttempts, "#tok": attrCBToken,
		},
		ExpressionAttributeValues: item{
			":state": avS(d.State), ":code": avN(int64(d.LastStatus)), ":next": avTime(d.NextAt),
			":pending": avS(evs.CallbackPending), ":n": avN(int64(d.Attempts)), ":tok": avS(token),
		},
	})
	if isConditionFailed(err) {
		if _, mine, _ := s.mine(ctx, s.t.Batches, batchKey(d.AccountID, d.BatchID), attrCBToken, token, "read delivery"); mine {
			return nil
		}
		return store.DeliveryMovedOn()
	}
	return wrapErr("record delivery", err)
}

// WebhookSecret returns the account's signing secret.
func (s *Store) WebhookSecret(ctx context.Context, accountID string) (evs.WebhookSecret, error) {
	it, err := s.find(ctx, s.t.Keys, item{attrPK: avS(prefixSecret + accountID)}, "read webhook secret", store.NoWebhookSecret)
	if err != nil {
		return evs.WebhookSecret{}, err
	}
	w := evs.WebhookSecret{AccountID: accountID, Current: getS(it, attrCurrent)}
	w.Retired, err = store.DecodeRetired(getS(it, attrRetired), getS(it, attrPrevious), getTime(it, attrRotatedAt))
	return w, err
}

// PutWebhookSecret stores w if the current secret is still ifCurrent: one
// conditional put, so of two concurrent rotations from the same secret
// exactly one is stored.
func (s *Store) PutWebhookSecret(ctx context.Context, w evs.WebhookSecret, ifCurrent string) error {
	rec := item{attrPK: avS(prefixSecret + w.AccountID), attrAccountID: avS(w.AccountID), attrCurrent: avS(w.Current)}
	retired, err := store.EncodeRetired(w.Retired)
	if err != nil {
		return err
	}
	if retired != "" {
		rec[attrRetired] = avS(retired)
	}
	in := &dynamodb.PutItemInput{TableName: aws.String(s.t.Keys), Item: rec, ConditionExpression: notExists()}
	if ifCurrent != "" {
		in.ConditionExpression = aws.String("#cur = :cur")
		in.ExpressionAttributeNames = map[string]string{"#cur": attrCurrent}
		in.ExpressionAttributeValues = item{":cur": avS(ifCurrent)}
	}
	_, err = s.c.PutItem(ctx, in)
	if isConditionFailed(err) {
		// An SDK resend fails against itself: the random secret, found
		// stored, was ours.
		if _, mine, _ := s.mine(ctx, s.t.Keys, item{attrPK: rec[attrPK]}, attrCurrent, w.Current, "read webhook secret"); mine {
			return nil
		}
		return store.SecretChanged()
	}
	return wrapErr("write webhook secret", err)
}
