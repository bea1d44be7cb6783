package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// The address quota (contract, section 14: "Quotas count addresses, not
// calls"): each account may have at most Quota.Limit addresses verified per
// calendar day or month, UTC. /v1/verify charges one address; batch
// creation charges its distinct addresses (counters.total minus
// duplicates), which is what will be verified. A call over the quota is
// 429 rate_limited with Retry-After the seconds until the period ends, and
// charges nothing. The charge is made inside the Idempotency-Key's claim,
// so a replay, which is answered before the handler runs, charges nothing,
// and a refused call (429, not kept) may be retried with the same key.

// AddressQuota keeps the quota's counters, one per account and period. The
// stores implement it: one conditional write per charge, so concurrent
// calls never take the counter past the limit.
type AddressQuota interface {
	// ChargeAddresses adds n to the counter of accountID in period when
	// the sum stays at most limit, and tells whether it did; otherwise the
	// counter is unchanged. expires is when the counter may be forgotten.
	ChargeAddresses(ctx context.Context, accountID, period string, n, limit int, expires time.Time) (bool, error)
	// RefundAddresses takes n back off the counter: the charge of a batch
	// that was not created after all.
	RefundAddresses(ctx context.Context, accountID, period string, n int) error
}

// Quota periods (EVS_QUOTA_PERIOD).
const (
	QuotaDay   = "day"
	QuotaMonth = "month"
)

// Quota configures the address quota.
type Quota struct {
	// Store keeps the counters; with Limit 0 it may be nil.
	Store AddressQuota
	// Limit is the addresses per period per account (EVS_QUOTA_ADDRESSES);
	// 0 means no quota.
	Limit int
	// Period is QuotaDay or QuotaMonth (default).
	Period string
}

// quotaPeriod returns the name of the period that holds now ("2026-11" or
// "2026-11-22") and when it ends.
func quotaPeriod(period string, now time.Time) (string, time.Time) {
	now = now.UTC()
	y, m, d := now.Date()
	if period == QuotaDay {
		return now.Format(time.DateOnly), time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
	}
	return fmt.Sprintf("%04d-%02d", y, int(m)), time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
}

// quotaError is a call refused by the address quota: a 429 whose
// Retry-After is the time left in the period.
type quotaError struct {
	err        *evs.Error
	retryAfter string
}

func (e *quotaError) Error() string { return e.err.Error() }
func (e *quotaError) Unwrap() error { return e.err }

// counterGrace keeps a counter past its period's end, so a clock a little
// behind never sees a period's counter gone while the period still runs.
const counterGrace = 48 * time.Hour

// chargeQuota charges n addresses to the account. refund gives the charge
// back (best effort) when the work it paid for is not done after all.
func (h *Handler) chargeQuota(ctx context.Context, p Principal, n int) (refund func(), err error) {
	q := h.d.Quota
	if q.Limit <= 0 || n <= 0 {
		return func() {}, nil
	}
	now := h.d.Now()
	period, end := quotaPeriod(q.Period, now)
	ok, err := q.Store.ChargeAddresses(ctx, p.AccountID, period, n, q.Limit, end.Add(counterGrace))
	if err != nil {
		return nil, fmt.Errorf("api: charge the address quota: %w", err)
	}
	if !ok {
		unit := "month"
		if q.Period == QuotaDay {
			unit = "day"
		}
		secs := int(math.Ceil(end.Sub(now).Seconds()))
		msg := fmt.Sprintf("The account's address quota (%d addresses a %s) is used up; it resets at %s.", q.Limit, unit, end.Format(time.RFC3339))
		if n > 1 {
			msg = fmt.Sprintf("The account's address quota (%d addresses a %s) is used up: fewer than this batch's %d distinct addresses are left; it resets at %s.", q.Limit, unit, n, end.Format(time.RFC3339))
		}
		return nil, &quotaError{err: evs.Errorf(evs.CodeRateLimited, "%s", msg), retryAfter: strconv.Itoa(max(secs, 1))}
	}
	return func() {
		if err := q.Store.RefundAddresses(context.WithoutCancel(ctx), p.AccountID, period, n); err != nil {
			// The account was charged for work not done; it costs it
			// quota, not money, so the call's own answer is unchanged.
			h.d.Logger.ErrorContext(ctx, "could not refund an address quota charge", slog.String("accountId", p.AccountID), slog.Int("addresses", n), slog.String("error", err.Error()))
		}
	}, nil
}

// quotaRetryAfter is the Retry-After of an address quota refusal in err.
func quotaRetryAfter(err error) (string, bool) {
	var qe *quotaError
	if errors.As(err, &qe) {
		return qe.retryAfter, true
	}
	return "", false
}
