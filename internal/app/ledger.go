package app

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// The ledger of what each account makes the service keep, on the store's
// quota counters. A charge goes to a counter named by what it counts and
// the hour its data goes ("bytes/2026-11-25T14"), so data that expires
// releases itself: use is the sum of the counters of hours still to come.
//
// A charge is conditional on its own counter staying within the limit
// less the other counters' sum read just before: exact within one hour;
// concurrent writes to other hours can pass the limit by a part each.

// counters are the store's quota counters, read back by range.
type counters interface {
	api.AddressQuota
	Counters(ctx context.Context, accountID, from, to string) (map[string]int, error)
}

// ledger is the runtime's api.Ledger.
type ledger struct {
	c       counters               // nil: no limit (a store without counters)
	limits  map[api.Kept]int64     // a live account's; a test-mode account has a tenth
	free    func() (uint64, error) // data directory's free space (`evs serve`); nil on AWS
	minFree int64                  // below it a charge is refused
	now     func() time.Time
	log     *slog.Logger
}

// lowSpaceRetry is the Retry-After of a write refused for lack of space.
const lowSpaceRetry = "60"

// hourOf names the counter of data kept until t: the hour it goes by.
func hourOf(what api.Kept, t time.Time) string {
	return string(what) + "/" + t.UTC().Truncate(time.Hour).Add(time.Hour).Format("2006-01-02T15")
}

// endOf is when the counter named period ends.
func endOf(what api.Kept, period string) time.Time {
	t, _ := time.Parse("2006-01-02T15", period[len(what)+1:])
	return t
}

// Charge implements api.Ledger.
func (l *ledger) Charge(ctx context.Context, p evs.Principal, what api.Kept, n int64, until time.Time) error {
	if l.free != nil && l.minFree > 0 {
		if free, err := l.free(); err == nil && free < uint64(l.minFree) {
			return &api.BusyError{Err: evs.Errorf(evs.CodeUnavailable,
				"The service is low on storage and takes no new batches, uploads, exports or outcomes until space is freed; retry later."), RetryAfter: lowSpaceRetry}
		}
	}
	limit := l.limits[what]
	if p.Test {
		limit /= 10
	}
	if l.c == nil || l.limits[what] <= 0 || n <= 0 {
		return nil
	}
	now := l.now()
	kept, err := l.live(ctx, p.AccountID, what, now)
	if err != nil {
		return err
	}
	period := hourOf(what, until)
	var used int64
	for _, v := range kept {
		used += int64(v)
	}
	ok, err := l.c.ChargeAddresses(ctx, p.AccountID, period, int(n), int(limit-used+int64(kept[period])), endOf(what, period).Add(time.Hour))
	if err != nil {
		return fmt.Errorf("app: charge the storage quota: %w", err)
	}
	if ok {
		return nil
	}
	// Retry when the first hour still to come has gone, or within a day.
	retry := 24 * time.Hour
	if len(kept) > 0 {
		retry = min(max(endOf(what, slices.Min(slices.Collect(maps.Keys(kept)))).Sub(now), time.Second), retry)
	}
	msg := "The account's storage quota (%d bytes kept at once: lists, results, exports, outcomes, uploads) would be exceeded: %d bytes are kept and this needs %d more. Older data frees room as it expires; delete outcomes, or retry later."
	if what == api.KeptOutcomes {
		msg = "The account's outcomes cap (%d outcomes kept at once) would be exceeded: %d are kept and this post adds %d. Older outcomes free room as they expire; delete some, or retry later."
	}
	return &store.LimitError{Err: evs.Errorf(evs.CodeRateLimited, msg, limit, used, n), Retry: retry}
}

// live is the account's counters of what for hours still to come.
func (l *ledger) live(ctx context.Context, accountID string, what api.Kept, now time.Time) (map[string]int, error) {
	kept, err := l.c.Counters(ctx, accountID, hourOf(what, now), string(what)+"/~")
	if err != nil {
		return nil, fmt.Errorf("app: read the storage quota: %w", err)
	}
	return kept, nil
}

// Release implements api.Ledger. A failure is logged: the account has
// less room than it should until the counter's hour ends.
func (l *ledger) Release(ctx context.Context, accountID string, what api.Kept, n int64, until time.Time) {
	if l.c == nil || l.limits[what] <= 0 || n <= 0 {
		return
	}
	err := func() error {
		if !until.IsZero() {
			return l.c.RefundAddresses(ctx, accountID, hourOf(what, until), int(n))
		}
		kept, err := l.live(ctx, accountID, what, l.now())
		if err != nil {
			return err
		}
		periods := slices.Sorted(maps.Keys(kept))
		for i := len(periods) - 1; i >= 0 && n > 0; i-- {
			k := min(n, int64(kept[periods[i]]))
			if err := l.c.RefundAddresses(ctx, accountID, periods[i], int(k)); err != nil {
				return err
			}
			n -= k
		}
		return nil
	}()
	if err != nil {
		l.log.ErrorContext(ctx, "could not release a charge of the storage quota", slog.String("accountId", accountID), slog.String("error", err.Error()))
	}
}
