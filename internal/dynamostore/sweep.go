package dynamostore

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/evs-dev/evs/internal/evs"
)

// The periodic sweep (sqsqueue's KindSweep) finds the batches and webhook
// deliveries that no SQS message carries any more: messages that went to
// the dead-letter queue, or were never sent because the queue was down.
//
// It reads the Batches table with one Scan per sweep. A sparse index
// (an attribute present only while a batch is unfinished or its delivery
// pending) would make the sweep's cost follow the live batches instead of
// the table's size, at the price of a write on every transition; at a few
// thousand batch records (~500 B each) one eventually consistent Scan costs
// a few hundred read units, every five minutes.
//
// Stall detection is kept on the batch record: the processed count the
// last sweep saw (swProcessed) and when it last changed or was claimed
// (swAtMs). Only a sweep writes them, with conditions, so PutResults is
// untouched and two sweeps can never both claim one stall.
const (
	attrSweepProcessed = "swProcessed"
	attrSweepAt        = "swAtMs"
)

// Sweep lists, in one Scan of the Batches table, the visible batches in
// state queued or running (oldest first) and the pending deliveries of final
// batches whose next attempt was due at dueBy and whose batch became final
// at dueBy or earlier: those are overdue enough that no live message is
// expected to carry them any more.
func (s *Store) Sweep(ctx context.Context, dueBy time.Time) (unfinished []evs.Batch, overdue []evs.Delivery, err error) {
	if !s.listKeysDone.Load() {
		// Best effort: a failed backfill leaves the old batches unlisted
		// until the next sweep tries again; the sweep's own work goes on.
		if n, err := s.backfillListKeys(ctx); err == nil && n == 0 {
			s.listKeysDone.Store(true)
		}
	}
	err = s.scanBatches(ctx, "#exp > :now AND (#st IN (:q, :r) OR (attribute_exists(#url) AND #cs = :pending AND #next <= :due AND #ca <= :due AND "+finalCondition+"))",
		dueBy, func(it item) bool {
			if st := evs.State(getS(it, attrState)); st.Final() {
				overdue = append(overdue, deliveryFrom(it))
			} else {
				unfinished = append(unfinished, batchFrom(it))
			}
			return true
		})
	if err != nil {
		return nil, nil, err
	}
	return oldestFirst(unfinished), overdue, nil
}

// DueDeliveries lists pending deliveries of live, final batches due at now
// (store.DueDeliveries), with a Scan: on AWS only the sweep looks for them,
// and SQS delays carry the timing otherwise.
func (s *Store) DueDeliveries(ctx context.Context, now time.Time, perAccount, limit int) ([]evs.Delivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	var all []evs.Delivery
	err := s.scanBatches(ctx, "#exp > :now AND attribute_exists(#url) AND #cs = :pending AND #next <= :due AND "+finalCondition,
		now, func(it item) bool {
			all = append(all, deliveryFrom(it))
			return true
		})
	return fairDue(all, perAccount, limit), err
}

// fairDue orders due deliveries as store.DueDeliveries lists them: each
// account's earliest first, the accounts taking turns, at most perAccount
// of one account (<= 0: no bound) and limit in all.
func fairDue(all []evs.Delivery, perAccount, limit int) []evs.Delivery {
	slices.SortFunc(all, func(a, b evs.Delivery) int {
		return cmp.Or(a.NextAt.Compare(b.NextAt), strings.Compare(a.BatchID, b.BatchID))
	})
	// An account's n-th delivery has rank n.
	type ranked struct {
		d    evs.Delivery
		rank int
	}
	seen := map[string]int{}
	rs := make([]ranked, 0, len(all))
	for _, d := range all {
		seen[d.AccountID]++
		if r := seen[d.AccountID]; perAccount <= 0 || r <= perAccount {
			rs = append(rs, ranked{d, r})
		}
	}
	// Stable: within a rank, the earlier delivery first.
	slices.SortStableFunc(rs, func(a, b ranked) int { return cmp.Compare(a.rank, b.rank) })
	out := make([]evs.Delivery, 0, min(len(rs), limit))
	for _, r := range rs[:min(len(rs), limit)] {
		out = append(out, r.d)
	}
	return out
}

// scanBatches scans the Batches table with filter, passing each match to
// each until it returns false. The filter may use :now (the store's clock),
// :due, the state values of finalCondition and :q, :r, :pending.
func (s *Store) scanBatches(ctx context.Context, filter string, due time.Time, each func(item) bool) error {
	names := map[string]string{
		"#st": attrState, "#exp": attrExpiresAtMs, "#url": attrCBURL, "#cs": attrCBState,
		"#next": attrCBNext, "#ca": attrCompletedAt, "#lk": attrListKey,
	}
	values := finalValues(item{
		":now": avTime(s.now()), ":due": avTime(due), ":pending": avS(evs.CallbackPending),
		":q": avS(evs.StateQueued), ":r": avS(evs.StateRunning),
	})
	// DynamoDB refuses names and values the expression does not use.
	maps.DeleteFunc(names, func(k, _ string) bool { return !containsToken(filter, k) })
	maps.DeleteFunc(values, func(k string, _ types.AttributeValue) bool { return !containsToken(filter, k) })
	p := dynamodb.NewScanPaginator(s.c, &dynamodb.ScanInput{
		TableName:                 aws.String(s.t.Batches),
		FilterExpression:          aws.String(filter),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return wrapErr("sweep batches", err)
		}
		for _, it := range page.Items {
			if !each(it) {
				return nil
			}
		}
	}
	return nil
}

// containsToken tells whether tok occurs in expr as a whole token (":q"
// must not match ":queued").
func containsToken(expr, tok string) bool {
	for i := 0; i+len(tok) <= len(expr); i++ {
		if expr[i:i+len(tok)] != tok {
			continue
		}
		end := i + len(tok)
		if end == len(expr) || !isNameChar(expr[end]) {
			return true
		}
	}
	return false
}

func isNameChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// ClaimStall records what a sweep at now sees of an unfinished batch and
// tells whether the batch is stalled: its processed count has not changed
// for at least after since a sweep first saw it so (or since the last
// claimed stall). Only the caller whose conditional write wins gets true,
// so concurrent sweeps re-plan a stall once, and a claimed stall starts a
// new window: one re-plan per window at most. A batch that moved (results
// written meanwhile) is never reported stalled. A batch that is final, gone
// or being created is not stalled.
func (s *Store) ClaimStall(ctx context.Context, accountID, id string, now time.Time, after time.Duration) (bool, error) {
	it, err := s.batchItem(ctx, accountID, id)
	if err != nil {
		if evs.ErrorCode(err) == evs.CodeNotFound {
			return false, nil
		}
		return false, err
	}
	st := evs.State(getS(it, attrState))
	if st != evs.StateQueued && st != evs.StateRunning {
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
	// A failed condition: results were written meanwhile, or another
	// sweep got here first; either way this sweep has nothing to do.
	ok, err := applied(err, "record sweep")
	return ok && stalled, err
}

// attrCBSweptAt is when a sweep last queued a message for the delivery.
const attrCBSweptAt = "cbSweptMs"

// ClaimOverdue tells the one sweep that should queue a message for the
// overdue delivery d (as Sweep listed it): true if the delivery has not
// moved since (same attempt count and next attempt) and no sweep claimed
// it in the last grace. Two sweeps listing the same delivery queue one
// message between them.
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
