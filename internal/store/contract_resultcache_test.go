package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// runResultCacheContract checks a result-cache store: entries read back
// whole under their own account, normalised address and mode only, with
// the submitted form of the address left out, and a later write replaces
// an entry.
func runResultCacheContract(t *testing.T, open func(t *testing.T) cache.Store) {
	ctx := context.Background()
	s := open(t)
	at := time.Date(2026, 11, 22, 10, 4, 5, 123_000_000, time.UTC)
	d := evs.Decision{
		Email: "bob@example.com", Normalized: "bob@example.com", Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeFull,
		Checks: evs.Checks{
			Syntax: evs.SyntaxCheck{Valid: true},
			DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{"mx.example.com"}, Rcode: "NOERROR"},
			SMTP:   evs.SMTPCheck{Result: evs.SMTPAccepted, Host: "mx.example.com", Code: 250, Provider: "other"},
		},
		CheckedAt: evs.Time{Time: at}, DurationMs: 321,
	}
	other := d
	other.Normalized, other.Email = "ann@example.com", "Ann@Example.com"
	if err := s.KeepDecisions(ctx, "a", []store.CacheEntry{
		{Decision: d, ExpiresAt: at.Add(24 * time.Hour)},
		{Decision: other, ExpiresAt: at.Add(time.Hour)},
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
	if !found || !exp.Equal(at.Add(24*time.Hour)) || got.Checks.SMTP.Provider != "other" || !got.CheckedAt.Equal(at) || got.Reason != d.Reason || got.DurationMs != 321 {
		t.Fatalf("read back %+v (expires %v, found %v)", got, exp, found)
	}
	if got, exp, _ := lookup("a", evs.ModeFull, "ann@example.com"); got.Email != "ann@example.com" || got.Normalized != "ann@example.com" || !exp.Equal(at.Add(time.Hour)) {
		t.Fatalf("an entry reads back under its normalised address: %q %q %v", got.Email, got.Normalized, exp)
	}
	for _, k := range []struct {
		account string
		mode    evs.Mode
		addr    string
	}{{"b", evs.ModeFull, "bob@example.com"}, {"a", evs.ModeQuick, "bob@example.com"}, {"a", evs.ModeFull, "Bob@example.com"}, {"a#full", evs.ModeFull, "bob@example.com"}} {
		if _, _, found := lookup(k.account, k.mode, k.addr); found {
			t.Fatalf("found under %+v", k)
		}
	}
	d.Reason, d.Checks.SMTP.Code = evs.ReasonRejectedEmail, 550
	if err := s.KeepDecisions(ctx, "a", []store.CacheEntry{{Decision: d, ExpiresAt: at.Add(2 * time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if got, exp, _ := lookup("a", evs.ModeFull, "bob@example.com"); got.Reason != evs.ReasonRejectedEmail || !exp.Equal(at.Add(2*time.Hour)) {
		t.Fatalf("not replaced: %v, %v", got.Reason, exp)
	}
	// Writes of more entries than one request of the store takes.
	var many []store.CacheEntry
	for i := 0; i < 60; i++ {
		e := d
		e.Normalized = "u" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "@example.com"
		many = append(many, store.CacheEntry{Decision: e, ExpiresAt: at.Add(time.Hour)})
	}
	if err := s.KeepDecisions(ctx, "c", many); err != nil {
		t.Fatal(err)
	}
	for _, e := range many {
		if _, _, found := lookup("c", evs.ModeFull, e.Decision.Normalized); !found {
			t.Fatalf("%s of a large write is missing", e.Decision.Normalized)
		}
	}
}
