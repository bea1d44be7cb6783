package api

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// The address quota counts addresses, not calls: at most Quota.Limit
// verified per account and calendar day or month, UTC; a batch charges its
// distinct addresses. A call over it is 429 with Retry-After to the
// period's end. The charge is made inside the Idempotency-Key's claim, so
// a replay charges nothing and a refused call may be retried with its key.

// AddressQuota keeps the quota's counters, one per account and period, one
// conditional write per charge, so concurrent calls never pass the limit.
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
	// PublishablePercent is the share of Limit, in percent rounded up,
	// that the account's publishable keys may use together
	// (EVS_QUOTA_PUBLISHABLE_PERCENT; 0 means DefaultPublishablePercent):
	// a web page's traffic never spends the rest, which is its secret
	// keys' whatever the page's visitors do.
	PublishablePercent int
	// IdempotencyKeys is the new Idempotency-Keys an account may use per
	// UTC day (EVS_MAX_IDEMPOTENCY_KEYS), counted on Store's counters; 0,
	// or no Store, means no limit. Each key's record is kept 24 h: this
	// bounds the records one account makes the store keep.
	IdempotencyKeys int
}

// DefaultPublishablePercent is Quota.PublishablePercent's default.
const DefaultPublishablePercent = 10

// publishableShare is the addresses a period the account's publishable
// keys may use: PublishablePercent of Limit, rounded up.
func (q Quota) publishableShare() int {
	return (q.Limit*cmp.Or(q.PublishablePercent, DefaultPublishablePercent) + 99) / 100
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

// RetryAfter renders a wait as Retry-After's whole seconds, at least 1.
func RetryAfter(wait time.Duration) string {
	return strconv.Itoa(max(int(math.Ceil(wait.Seconds())), 1))
}

// counterGrace keeps a counter past its period's end, so a clock a little
// behind never sees a period's counter gone while the period still runs.
const counterGrace = 48 * time.Hour

// chargeQuota charges n addresses to the account, a publishable key's to
// its keys' share first (Quota.PublishablePercent). refund gives the
// charge back (best effort) when the work is not done after all.
func (h *Handler) chargeQuota(ctx context.Context, p evs.Principal, n int) (refund func(), err error) {
	q := h.d.Quota
	pq, cheap := q.Store.(PublishableQuota)
	cheap = cheap && p.Kind == evs.KeyPublishable && h.d.PublishableLimits != (PublishableLimits{})
	if (q.Limit <= 0 && !cheap) || n <= 0 {
		return func() {}, nil
	}
	now := h.d.Now()
	period, end := quotaPeriod(q.Period, now)
	unit := cmp.Or(q.Period, QuotaMonth) // "day" or "month", as the messages say it
	shareMsg := func() string {
		return fmt.Sprintf("The publishable keys' share of the account's address quota (%d of its %d addresses a %s) is used up; it resets at %s.", q.publishableShare(), q.Limit, unit, end.Format(time.RFC3339))
	}
	quotaMsg := func() string {
		if n > 1 {
			return fmt.Sprintf("The account's address quota (%d addresses a %s) is used up: fewer than this batch's %d distinct addresses are left; it resets at %s.", q.Limit, unit, n, end.Format(time.RFC3339))
		}
		return fmt.Sprintf("The account's address quota (%d addresses a %s) is used up; it resets at %s.", q.Limit, unit, end.Format(time.RFC3339))
	}
	if cheap {
		return h.chargePublishable(ctx, pq, p, n, period, now, end, shareMsg, quotaMsg)
	}
	share := func() {}
	if p.Kind == evs.KeyPublishable {
		share, err = h.charge(ctx, p.AccountID, "publishable keys' share of the address quota", publishablePeriod+"share/"+period, n, q.publishableShare(), now, end, shareMsg)
		if err != nil {
			return nil, err
		}
	}
	whole, err := h.charge(ctx, p.AccountID, "address quota", period, n, q.Limit, now, end, quotaMsg)
	if err != nil {
		share()
		return nil, err
	}
	return func() { whole(); share() }, nil
}

// chargePublishable is chargeQuota of a publishable key's call on a
// PublishableQuota: the key's minute, the share and the quota in one write.
func (h *Handler) chargePublishable(ctx context.Context, pq PublishableQuota, p evs.Principal, n int, period string, now, end time.Time, shareMsg, quotaMsg func() string) (func(), error) {
	q, l := h.d.Quota, h.d.PublishableLimits.Of(p)
	start := now.UTC().Truncate(time.Minute)
	c := store.CallCharge{AccountID: p.AccountID, KeyID: p.KeyID, Minute: start.Format("2006-01-02T15:04"), PerKey: cmp.Or(l.PerKey, math.MaxInt32),
		Period: period, N: n, Limit: max(q.Limit, 0), Share: q.publishableShare(), Expires: end.Add(counterGrace)}
	refused, err := pq.ChargePublishable(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("api: charge a publishable key's call: %w", err)
	}
	switch refused {
	case store.RefusedKey:
		return nil, &store.LimitError{Err: evs.Errorf(evs.CodeRateLimited, "Too many calls with this publishable key (%d a minute); retry after the time in Retry-After.", l.PerKey), Retry: start.Add(time.Minute).Sub(now)}
	case store.RefusedShare:
		return nil, &store.LimitError{Err: evs.Errorf(evs.CodeRateLimited, "%s", shareMsg()), Retry: end.Sub(now)}
	case store.RefusedQuota:
		return nil, &store.LimitError{Err: evs.Errorf(evs.CodeRateLimited, "%s", quotaMsg()), Retry: end.Sub(now)}
	}
	if c.Limit == 0 {
		return func() {}, nil
	}
	return func() {
		if err := pq.RefundPublishable(context.WithoutCancel(ctx), p.AccountID, period, n); err != nil {
			h.d.Logger.ErrorContext(ctx, "could not refund a publishable key's charge", slog.String("accountId", p.AccountID), slog.String("error", err.Error()))
		}
	}, nil
}

// keysPeriod prefixes the day of an Idempotency-Key counter, so it never
// meets an address quota counter of the same day.
const keysPeriod = "idempotency-keys/"

// chargeKey charges one new Idempotency-Key to the account's UTC day;
// refund gives it back when the call's record is not kept after all.
func (h *Handler) chargeKey(ctx context.Context, p evs.Principal) (refund func(), err error) {
	q := h.d.Quota
	if q.IdempotencyKeys <= 0 || q.Store == nil {
		return func() {}, nil
	}
	now := h.d.Now()
	day, end := quotaPeriod(QuotaDay, now)
	return h.charge(ctx, p.AccountID, "Idempotency-Key limit", keysPeriod+day, 1, q.IdempotencyKeys, now, end, func() string {
		return fmt.Sprintf("The account's Idempotency-Key limit (%d new keys a day, UTC) is used up; it resets at %s. Calls without a key, and repeats of a key already used, still work.", q.IdempotencyKeys, end.Format(time.RFC3339))
	})
}

// charge adds n to the account's counter of limit named what for period,
// which ends at end; over the limit it is refused with refused's message
// and a Retry-After to the period's end.
func (h *Handler) charge(ctx context.Context, accountID, what, period string, n, limit int, now, end time.Time, refused func() string) (refund func(), err error) {
	st := h.d.Quota.Store
	ok, err := st.ChargeAddresses(ctx, accountID, period, n, limit, end.Add(counterGrace))
	if err != nil {
		return nil, fmt.Errorf("api: charge the %s: %w", what, err)
	}
	if !ok {
		return nil, &store.LimitError{Err: evs.Errorf(evs.CodeRateLimited, "%s", refused()), Retry: end.Sub(now)}
	}
	return func() {
		if err := st.RefundAddresses(context.WithoutCancel(ctx), accountID, period, n); err != nil {
			// The account was charged for work not done; it costs it
			// quota, not money, so the call's own answer is unchanged.
			h.d.Logger.ErrorContext(ctx, "could not refund a charge of the "+what, slog.String("accountId", accountID), slog.Int("charged", n), slog.String("error", err.Error()))
		}
	}, nil
}
