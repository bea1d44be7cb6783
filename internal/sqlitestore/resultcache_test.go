package sqlitestore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
)

func TestResultCacheContract(t *testing.T) {
	testkit.RunResultCacheContract(t, func(t *testing.T) testkit.ResultCacheStore {
		return openStore(t, t.TempDir(), time.Now)
	})
}

// The sweep deletes expired entries, and only those.
func TestResultCacheSweep(t *testing.T) {
	ctx := context.Background()
	clk := testkit.NewClock(t0)
	s := openStore(t, t.TempDir(), clk.Now)
	entry := func(addr string, ttl time.Duration) store.CacheEntry {
		return store.CacheEntry{Decision: evs.Decision{Email: addr, Normalized: addr, Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeFull, CheckedAt: t0}, ExpiresAt: t0.Add(ttl)}
	}
	if err := s.KeepDecisions(ctx, "a", []store.CacheEntry{entry("ann@example.com", time.Hour), entry("bob@example.com", 2*time.Hour)}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(90 * time.Minute)
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{"ann@example.com": false, "bob@example.com": true} {
		if _, _, found, err := s.CachedDecision(ctx, "a", evs.ModeFull, addr); err != nil || found != want {
			t.Fatalf("%s after the sweep: found %v (%v), want %v", addr, found, err, want)
		}
	}
}

// A batch keeps its request's maxAge: a restart resumes it with the same
// bound, "reuse nothing" included.
func TestBatchKeepsMaxAge(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), testkit.NewClock(t0).Now)
	for i, maxAge := range []time.Duration{0, evs.NoReuse, 90 * time.Second} {
		b := evs.Batch{ID: fmt.Sprintf("b%d", i), AccountID: "a", Mode: evs.ModeFull, State: evs.StateQueued,
			CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), Counters: evs.Counters{Total: 1}, MaxAge: maxAge}
		if err := s.CreateBatch(ctx, b, []evs.Item{{Seq: 0, Email: "x@example.com", Domain: "example.com"}}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Batch(ctx, "a", b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if (maxAge < 0) != (got.MaxAge < 0) || (maxAge >= 0 && got.MaxAge != maxAge) {
			t.Fatalf("maxAge %v read back as %v", maxAge, got.MaxAge)
		}
		un, err := s.UnfinishedBatches(ctx)
		if err != nil || len(un) != i+1 || un[i].MaxAge != got.MaxAge {
			t.Fatalf("unfinished batches: %+v, %v", un, err)
		}
	}
}
