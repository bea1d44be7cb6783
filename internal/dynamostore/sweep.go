package dynamostore

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/evs-dev/evs/internal/evs"
)

// The periodic sweep (batch.KindSweep) finds the batches and webhook
// deliveries that no SQS message carries any more: messages that went to
// the dead-letter queue, or were never sent because the queue was down.
//
// It reads activeIndex (keys only), never the table. A batch record carries
// attrActive while it has work a sweep may restart (hasWork); leaving that
// set is for good, so no transition touches it: the first sweep that reads a
// record with no work left removes it. attrActive has one value: the index
// is one partition, written at creation and when a sweep retires a batch.
const (
	activeIndex = "byActive"
	attrActive  = "active"
)

var activeValue = avS("1")

// Stall detection is kept on the batch record: the processed count the
// last sweep saw (swProcessed) and when it last changed or was claimed
// (swAtMs). Only a sweep writes them, with conditions, so PutResults is
// untouched and two sweeps can never both claim one stall.
const (
	attrSweepProcessed = "swProcessed"
	attrSweepAt        = "swAtMs"
)

// Sweep lists the visible queued or running batches (oldest first) and the
// pending deliveries of batches final by dueBy whose next attempt was due by
// dueBy: overdue enough that no live message should carry them any more.
func (s *Store) Sweep(ctx context.Context, dueBy time.Time) (unfinished []evs.Batch, overdue []evs.Delivery, err error) {
	s.backfill(ctx)
	unfinished, final, err := s.activeBatches(ctx)
	for _, it := range final {
		if dueBy.Compare(getTime(it, attrCBNext)) >= 0 && dueBy.Compare(getTime(it, attrCompletedAt)) >= 0 {
			overdue = append(overdue, deliveryFrom(it))
		}
	}
	return unfinished, overdue, err
}

// hasWork tells whether a batch record has work a sweep may restart: it is
// not final, or its delivery is pending.
func hasWork(it item) bool {
	return !evs.State(getS(it, attrState)).Final() ||
		getS(it, attrCBURL) != "" && evs.CallbackState(getS(it, attrCBState)) == evs.CallbackPending
}

// activeBatches reads the active index's visible records that have work,
// oldest first, and retires the others (best effort).
func (s *Store) activeBatches(ctx context.Context) (unfinished []evs.Batch, final []item, err error) {
	var keys []item
	err = s.query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.t.Batches),
		IndexName:                 aws.String(activeIndex),
		KeyConditionExpression:    aws.String("#a = :a"),
		ExpressionAttributeNames:  map[string]string{"#a": attrActive},
		ExpressionAttributeValues: item{":a": activeValue},
	}, "list active batches", func(it item) bool {
		keys = append(keys, batchKey(getS(it, attrAccountID), getS(it, attrID)))
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	recs, err := s.getAll(ctx, s.t.Batches, keys, nil, "read active batches")
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(recs, func(a, b item) int {
		return cmp.Or(getTime(a, attrCreatedAt).Compare(getTime(b, attrCreatedAt)), strings.Compare(getS(a, attrID), getS(b, attrID)))
	})
	for _, it := range recs {
		live := s.visible(it) && hasWork(it)
		switch {
		case live && evs.State(getS(it, attrState)).Final():
			final = append(final, it)
		case live:
			unfinished = append(unfinished, batchFrom(it))
		default: // the condition keeps a record TTL deleted meanwhile deleted
			_, _ = s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(s.t.Batches), Key: batchKey(getS(it, attrAccountID), getS(it, attrID)),
				UpdateExpression:         aws.String("REMOVE #a"),
				ConditionExpression:      aws.String("attribute_exists(#a)"),
				ExpressionAttributeNames: map[string]string{"#a": attrActive},
			})
		}
	}
	return unfinished, final, nil
}

// ClaimStall records what a sweep at now sees of an unfinished batch and
// tells whether it is stalled: its processed count has not changed for
// after since a sweep first saw it so (or since the last claimed stall).
// Only the winner of the conditional write gets true, so concurrent sweeps
// re-plan a stall once, and a claim starts a new window. A batch that moved,
// is final, gone or being created is not stalled.
func (s *Store) ClaimStall(ctx context.Context, accountID, id string, now time.Time, after time.Duration) (bool, error) {
	it, err := s.batchItem(ctx, accountID, id)
	if err != nil && evs.ErrorCode(err) != evs.CodeNotFound {
		return false, err
	}
	// Not found: no state.
	if st := evs.State(getS(it, attrState)); st != evs.StateQueued && st != evs.StateRunning {
		return false, nil
	}
	processed := getN(it, attrProcessed)
	_, seen := it[attrSweepAt]
	same := seen && getN(it, attrSweepProcessed) == processed
	stalled := same && now.Sub(getTime(it, attrSweepAt)) >= after
	if same && !stalled {
		return false, nil // still within the window: nothing to write
	}
	cond := "#st IN (:q, :r) AND #p = :p AND "
	values := item{
		":q": avS(evs.StateQueued), ":r": avS(evs.StateRunning), ":p": avN(processed), ":now": avTime(now),
	}
	if seen {
		cond += "#sa = :seen"
		values[":seen"] = it[attrSweepAt]
	} else {
		cond += "attribute_not_exists(#sa)"
	}
	err = s.retryConflict(ctx, func() error {
		_, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.t.Batches),
			Key:                       batchKey(accountID, id),
			UpdateExpression:          aws.String("SET #sp = :p, #sa = :now"),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  map[string]string{"#st": attrState, "#p": attrProcessed, "#sp": attrSweepProcessed, "#sa": attrSweepAt},
			ExpressionAttributeValues: values,
		})
		return err
	})
	// A failed condition: results came meanwhile, or another sweep won.
	ok, err := applied(err, "record sweep")
	return ok && stalled, err
}

// attrCBSweptAt is when a sweep last queued a message for the delivery.
const attrCBSweptAt = "cbSweptMs"

// ClaimOverdue tells the one sweep that should queue a message for the
// overdue delivery d: true if it has not moved since Sweep listed it and no
// sweep claimed it in the last grace.
func (s *Store) ClaimOverdue(ctx context.Context, d evs.Delivery, now time.Time, grace time.Duration) (bool, error) {
	if d.AccountID == "" || d.BatchID == "" {
		return false, nil
	}
	_, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.t.Batches),
		Key:              batchKey(d.AccountID, d.BatchID),
		UpdateExpression: aws.String("SET #sw = :now"),
		ConditionExpression: aws.String("#cs = :pending AND #n = :n AND #next = :next AND " +
			"(attribute_not_exists(#sw) OR #sw <= :before)"),
		ExpressionAttributeNames: map[string]string{
			"#sw": attrCBSweptAt, "#cs": attrCBState, "#n": attrCBAttempts, "#next": attrCBNext,
		},
		ExpressionAttributeValues: item{
			":now": avTime(now), ":before": avTime(now.Add(-grace)), ":pending": avS(evs.CallbackPending),
			":n": avN(int64(d.Attempts)), ":next": avTime(d.NextAt),
		},
	})
	return applied(err, "claim overdue delivery")
}
