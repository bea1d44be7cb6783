package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
)

// The sweep deletes expired entries, and only those.
func TestResultCacheSweep(t *testing.T) {
	ctx := context.Background()
	clk := testkit.NewClock(t0)
	s := openStore(t, t.TempDir(), clk.Now)
	entry := func(addr string, ttl time.Duration) store.CacheEntry {
		return store.CacheEntry{Decision: evs.Decision{Email: addr, Normalized: addr, Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeFull, CheckedAt: evs.Time{Time: t0}}, ExpiresAt: t0.Add(ttl)}
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
