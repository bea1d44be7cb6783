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

// The result cache keeps one entry per account, normalised address and
// mode: written entries read back whole under their own key only, a later
// write replaces an entry, and the sweep deletes expired ones.
func TestResultCache(t *testing.T) {
	ctx := context.Background()
	clk := testkit.NewClock(t0)
	s := openStore(t, t.TempDir(), clk.Now)
	d := evs.Decision{
		Email: "bob@example.com", Normalized: "bob@example.com", Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeFull,
		Checks: evs.Checks{
			Syntax: evs.SyntaxCheck{Valid: true},
			DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{"mx.example.com"}, Rcode: "NOERROR"},
			SMTP:   evs.SMTPCheck{Result: evs.SMTPAccepted, Host: "mx.example.com", Code: 250, Provider: "other"},
		},
		CheckedAt: t0, DurationMs: 321,
	}
	short := d
	short.Normalized, short.Email = "ann@example.com", "Ann@Example.com"
	if err := s.KeepDecisions(ctx, "a", []store.CacheEntry{
		{Decision: d, ExpiresAt: t0.Add(24 * time.Hour)},
		{Decision: short, ExpiresAt: t0.Add(time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	lookup := func(account string, mode evs.Mode, addr string) (evs.Decision, time.Time, bool) {
		t.Helper()
		got, exp, found, err := s.CachedDecision(ctx, account, mode, addr)
		if err != nil {
			t.Fatal(err)
		}
		return got, exp, found
	}
	got, exp, found := lookup("a", evs.ModeFull, "bob@example.com")
	if !found || !exp.Equal(t0.Add(24*time.Hour)) || got.Checks.SMTP.Provider != "other" || !got.CheckedAt.Equal(t0) || got.Reason != d.Reason || got.DurationMs != 321 {
		t.Fatalf("read back %+v (expires %v, found %v)", got, exp, found)
	}
	if got, _, _ := lookup("a", evs.ModeFull, "ann@example.com"); got.Email != "ann@example.com" || got.Normalized != "ann@example.com" {
		t.Fatalf("an entry reads back under its normalised address: %q %q", got.Email, got.Normalized)
	}
	for _, k := range []struct {
		account string
		mode    evs.Mode
		addr    string
	}{{"b", evs.ModeFull, "bob@example.com"}, {"a", evs.ModeQuick, "bob@example.com"}, {"a", evs.ModeFull, "Bob@example.com"}} {
		if _, _, found := lookup(k.account, k.mode, k.addr); found {
			t.Fatalf("found under %+v", k)
		}
	}
	// A later write replaces the entry.
	d.Reason, d.Checks.SMTP.Code = evs.ReasonRejectedEmail, 550
	if err := s.KeepDecisions(ctx, "a", []store.CacheEntry{{Decision: d, ExpiresAt: t0.Add(2 * time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if got, exp, _ := lookup("a", evs.ModeFull, "bob@example.com"); got.Reason != evs.ReasonRejectedEmail || !exp.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("not replaced: %v, %v", got.Reason, exp)
	}
	// The sweep deletes what has expired, and only that.
	clk.Advance(90 * time.Minute)
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, found := lookup("a", evs.ModeFull, "ann@example.com"); found {
		t.Fatal("an expired entry outlived the sweep")
	}
	if _, _, found := lookup("a", evs.ModeFull, "bob@example.com"); !found {
		t.Fatal("the sweep deleted an entry not expired yet")
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
