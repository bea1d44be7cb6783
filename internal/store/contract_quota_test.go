package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
)

// runQuotaContract runs the address quota's contract against a fresh store
// from newQuota: charges stay within the limit, a refused charge changes
// nothing, counters are per account and period, refunds give back, and
// concurrent charges never overshoot.
func runQuotaContract(t *testing.T, newQuota func(t *testing.T) api.AddressQuota) {
	ctx := context.Background()
	exp := base.Add(60 * 24 * time.Hour)
	charge := func(t *testing.T, q api.AddressQuota, acct, period string, n, limit int) bool {
		t.Helper()
		ok, err := q.ChargeAddresses(ctx, acct, period, n, limit, exp)
		if err != nil {
			t.Fatalf("ChargeAddresses(%s, %s, %d, %d): %v", acct, period, n, limit, err)
		}
		return ok
	}
	t.Run("WithinLimit", func(t *testing.T) {
		q := newQuota(t)
		steps := []struct {
			n    int
			want bool
		}{{3, true}, {3, false}, {2, true}, {1, false}, {6, false}}
		for i, s := range steps {
			if got := charge(t, q, "acct-1", "2026-11", s.n, 5); got != s.want {
				t.Fatalf("step %d: charge %d of 5 = %v, want %v", i, s.n, got, s.want)
			}
		}
		// Another account, another period: counters of their own.
		if !charge(t, q, "acct-2", "2026-11", 5, 5) || !charge(t, q, "acct-1", "2026-12", 5, 5) {
			t.Fatal("a fresh counter refused a charge of the whole limit")
		}
		if charge(t, q, "acct-3", "2026-11", 6, 5) {
			t.Fatal("a fresh counter took more than the limit")
		}
		// A refused charge changed nothing: acct-3 still has all 5.
		if !charge(t, q, "acct-3", "2026-11", 5, 5) {
			t.Fatal("a refused charge was counted")
		}
	})
	t.Run("Refund", func(t *testing.T) {
		q := newQuota(t)
		if !charge(t, q, "acct-1", "2026-11", 4, 5) || charge(t, q, "acct-1", "2026-11", 2, 5) {
			t.Fatal("setup")
		}
		if err := q.RefundAddresses(ctx, "acct-1", "2026-11", 3); err != nil {
			t.Fatal(err)
		}
		if !charge(t, q, "acct-1", "2026-11", 4, 5) || charge(t, q, "acct-1", "2026-11", 1, 5) {
			t.Fatal("after a refund of 3 of 4, a charge of 4 must pass and then nothing more")
		}
		// A refund of more than is charged leaves the counter at 0, never
		// below: the account gets back what it used, not extra room.
		if err := q.RefundAddresses(ctx, "acct-1", "2026-11", 8); err != nil {
			t.Fatal(err)
		}
		if !charge(t, q, "acct-1", "2026-11", 5, 5) || charge(t, q, "acct-1", "2026-11", 1, 5) {
			t.Fatal("after refunding more than was charged, the whole quota and no more must pass")
		}
		// A counter that does not exist takes a refund without error.
		if err := q.RefundAddresses(ctx, "acct-9", "2026-11", 3); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("PeriodsAreNames", func(t *testing.T) {
		// The Idempotency-Key limit keeps its counters beside the quota's,
		// under periods of its own name: they never share a count.
		q := newQuota(t)
		if !charge(t, q, "acct-1", "2026-11-25", 5, 5) || !charge(t, q, "acct-1", "idempotency-keys/2026-11-25", 5, 5) {
			t.Fatal("a counter of another name shared the first one's count")
		}
		if charge(t, q, "acct-1", "idempotency-keys/2026-11-25", 1, 5) {
			t.Fatal("a full counter took one more")
		}
	})
	t.Run("CountersByRange", func(t *testing.T) {
		// The byte ledger keeps a counter per account and hour its bytes
		// go, and sums the live ones: a range of periods, by period.
		q := newQuota(t)
		cs, ok := q.(interface {
			Counters(ctx context.Context, accountID, from, to string) (map[string]int, error)
		})
		if !ok {
			t.Fatal("the store cannot read its counters back")
		}
		for _, c := range []struct {
			acct, period string
			n            int
		}{{"acct-1", "bytes/2026-11-22T10", 7}, {"acct-1", "bytes/2026-11-22T11", 5}, {"acct-1", "bytes/2026-11-22T12", 3},
			{"acct-1", "bytes/2026-11-22T09", 100}, {"acct-1", "2026-11", 50}, {"acct-2", "bytes/2026-11-22T11", 9}} {
			if !charge(t, q, c.acct, c.period, c.n, 1000) {
				t.Fatalf("charge %v refused", c)
			}
		}
		if err := q.RefundAddresses(ctx, "acct-1", "bytes/2026-11-22T11", 2); err != nil {
			t.Fatal(err)
		}
		got, err := cs.Counters(ctx, "acct-1", "bytes/2026-11-22T10", "bytes/2026-11-22T12")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"bytes/2026-11-22T10": 7, "bytes/2026-11-22T11": 3}
		if len(got) != len(want) || got["bytes/2026-11-22T10"] != 7 || got["bytes/2026-11-22T11"] != 3 {
			t.Fatalf("Counters = %v, want %v", got, want)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		q := newQuota(t)
		const limit, callers = 10, 25
		var ok atomic.Int32
		var wg sync.WaitGroup
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := q.ChargeAddresses(ctx, "acct-1", "2026-11", 1, limit, exp)
				if err != nil {
					t.Error(err)
				}
				if got {
					ok.Add(1)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != limit {
			t.Fatalf("%d of %d concurrent charges of 1 passed, limit %d", ok.Load(), callers, limit)
		}
	})
}
