package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
)

// storedBatch is a queued batch of account acct with n addresses (one item
// each) that expires after ttl.
func storedBatch(acct, id string, n int, ttl time.Duration) (evs.Batch, []evs.Item) {
	b := evs.Batch{ID: id, AccountID: acct, Mode: evs.ModeQuick, State: evs.StateQueued, CreatedAt: t0, ExpiresAt: t0.Add(ttl),
		Counters: evs.Counters{Total: n}}
	items := make([]evs.Item, n)
	for i := range items {
		items[i] = evs.Item{Seq: i, Email: fmt.Sprintf("u%d@d.example", i), Domain: "d.example"}
	}
	return b, items
}

// CreateBatchBounded's stored-address limit: step by step, what passes,
// what is refused and with which Retry-After, as batches expire and the
// sweep runs.
func TestCreateBatchBoundedStored(t *testing.T) {
	ctx := context.Background()
	clk := testkit.NewClock(t0)
	s := openStore(t, t.TempDir(), clk.Now)
	const limit = 10
	steps := []struct {
		name  string
		at    time.Duration // clock, from t0
		sweep bool
		acct  string
		n     int
		ttl   time.Duration // from t0
		retry time.Duration // 0: created
	}{
		{name: "first", acct: "a", n: 4, ttl: time.Hour},
		{name: "second", acct: "a", n: 5, ttl: 2 * time.Hour},
		{name: "one over", acct: "a", n: 2, ttl: 3 * time.Hour, retry: time.Hour},
		{name: "over by more than the oldest", acct: "a", n: 6, ttl: 3 * time.Hour, retry: 2 * time.Hour},
		{name: "another account", acct: "b", n: limit, ttl: time.Hour},
		{name: "the last one fits", acct: "a", n: 1, ttl: 3 * time.Hour},
		{name: "more than the limit alone", acct: "c", n: limit + 1, ttl: time.Hour, retry: maxStoredRetry},
		// The first batch expired but is not swept yet: not counted.
		{name: "after the first expired", at: time.Hour, acct: "a", n: 4, ttl: 4 * time.Hour},
		{name: "full again", at: time.Hour, acct: "a", n: 1, ttl: 4 * time.Hour, retry: time.Hour},
		{name: "swept", at: 2 * time.Hour, sweep: true, acct: "a", n: 5, ttl: 5 * time.Hour},
		{name: "swept, full", at: 2 * time.Hour, acct: "a", n: 1, ttl: 5 * time.Hour, retry: time.Hour},
	}
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		if st.sweep {
			if _, err := s.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
		}
		before, err := s.StoredAddresses(ctx, st.acct)
		if err != nil {
			t.Fatal(err)
		}
		b, items := storedBatch(st.acct, fmt.Sprint("b", i), st.n, st.ttl)
		err = s.CreateBatchBounded(ctx, b, items, 0, limit)
		after, serr := s.StoredAddresses(ctx, st.acct)
		if serr != nil {
			t.Fatal(serr)
		}
		if st.retry == 0 {
			if err != nil || after != before+st.n {
				t.Fatalf("%s: %v, stored %d → %d", st.name, err, before, after)
			}
			continue
		}
		var le *store.LimitError
		if !errors.As(err, &le) || evs.ErrorCode(err) != evs.CodeRateLimited || le.RetryAfter() != st.retry ||
			!strings.Contains(evs.ErrorMessage(err), fmt.Sprintf("stored-address limit (%d addresses in batches still kept)", limit)) {
			t.Fatalf("%s: %v (retry %v), want rate_limited naming the limit, retry %v", st.name, err, le, st.retry)
		}
		if after != before {
			t.Fatalf("%s: refused, yet stored %d → %d", st.name, before, after)
		}
		if _, err := s.Batch(ctx, st.acct, b.ID); evs.ErrorCode(err) != evs.CodeNotFound {
			t.Fatalf("%s: refused batch readable: %v", st.name, err)
		}
	}
	// Without a limit nothing is refused, and the counter still counts.
	b, items := storedBatch("a", "unbounded", 7, time.Hour*6)
	if err := s.CreateBatchWithin(ctx, b, items, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := s.StoredAddresses(ctx, "a"); err != nil || n != limit+7 {
		t.Fatalf("stored %d, %v; want %d", n, err, limit+7)
	}
}

// Concurrent creations never take an account past its stored-address
// limit.
func TestCreateBatchBoundedConcurrent(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), func() time.Time { return t0 })
	const limit, size, callers = 10, 3, 12
	var ok atomic.Int32
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, items := storedBatch("a", fmt.Sprint("c", i), size, time.Hour)
			err := s.CreateBatchBounded(ctx, b, items, 0, limit)
			switch evs.ErrorCode(err) {
			case "":
				ok.Add(1)
			case evs.CodeRateLimited:
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := int(ok.Load()); got != limit/size {
		t.Fatalf("%d of %d concurrent creations of %d passed, limit %d", got, callers, size, limit)
	}
	if n, err := s.StoredAddresses(ctx, "a"); err != nil || n != limit/size*size {
		t.Fatalf("stored %d, %v", n, err)
	}
}
