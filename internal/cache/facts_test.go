package cache_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// The engine takes it as its domain facts, and the batch runner as its
// greylisting delays.
var (
	_ verify.DomainFacts = (*cache.Facts)(nil)
	_ batch.GreyFacts    = (*cache.Facts)(nil)
)

// TestFacts: what is kept (conclusive answers only), for how long, and
// what is counted.
func TestFacts(t *testing.T) {
	ctx := context.Background()
	clock := testkit.NewClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	counts := map[string]int{}
	m := cache.NewFacts(cache.FactsConfig{TTL: time.Hour, Now: clock.Now, Count: func(r string) { counts[r]++ }})
	for _, tc := range []struct{ domain, result string }{
		{"all.example", evs.SMTPAccepted},
		{"strict.example", evs.SMTPRejected},
		{"grey.example", evs.SMTPGreylisted},
		{"slow.example", evs.SMTPTimeout},
		{"gone.example", evs.SMTPUnreachable},
	} {
		m.KeepAcceptAll(ctx, tc.domain, tc.result)
	}
	check := func(domain, want string, wantOK bool) {
		t.Helper()
		if got, ok := m.AcceptAll(ctx, domain); got != want || ok != wantOK {
			t.Errorf("AcceptAll(%s) = %q, %v; want %q, %v", domain, got, ok, want, wantOK)
		}
	}
	check("all.example", evs.SMTPAccepted, true)
	check("strict.example", evs.SMTPRejected, true)
	check("grey.example", "", false) // inconclusive: not about the domain
	check("slow.example", "", false)
	check("gone.example", "", false)
	check("new.example", "", false)
	if counts["hit"] != 2 || counts["miss"] != 4 {
		t.Errorf("counted %v, want 2 hits and 4 misses", counts)
	}
	// An answer read back from a slower tier keeps its own expiry.
	m.Remember("tier.example", evs.SMTPAccepted, clock.Now().Add(10*time.Minute))
	clock.Advance(10 * time.Minute)
	check("tier.example", "", false)
	check("all.example", evs.SMTPAccepted, true)
	clock.Advance(50 * time.Minute)
	check("all.example", "", false)
}

// TestFactsBounded: past MaxDomains the least recently used domain is
// forgotten first.
func TestFactsBounded(t *testing.T) {
	ctx := context.Background()
	m := cache.NewFacts(cache.FactsConfig{MaxDomains: 3})
	for i := range 4 {
		m.KeepAcceptAll(ctx, fmt.Sprintf("d%d.example", i), evs.SMTPRejected)
		if i == 2 {
			m.AcceptAll(ctx, "d0.example") // used: d1 is the oldest now
		}
	}
	if m.Len() != 3 {
		t.Fatalf("holds %d domains, want 3", m.Len())
	}
	for domain, want := range map[string]bool{"d0.example": true, "d1.example": false, "d2.example": true, "d3.example": true} {
		if _, ok := m.AcceptAll(ctx, domain); ok != want {
			t.Errorf("%s kept: %v, want %v", domain, ok, want)
		}
	}
}

// BenchmarkFactsFull fills a Facts to its default bound and reports the
// heap it holds (docs/cache.md gives the figure).
func BenchmarkFactsFull(b *testing.B) {
	ctx := context.Background()
	var before, after runtime.MemStats
	for range b.N {
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := cache.NewFacts(cache.FactsConfig{})
		for i := range cache.DefaultMaxDomains {
			m.KeepAcceptAll(ctx, fmt.Sprintf("mail-%06d.example.com", i), evs.SMTPRejected)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MB/full")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(m.Len()), "B/domain")
		runtime.KeepAlive(m)
	}
}

// BenchmarkAcceptAll is one lookup in a full Facts.
func BenchmarkAcceptAll(b *testing.B) {
	ctx := context.Background()
	m := cache.NewFacts(cache.FactsConfig{})
	for i := range cache.DefaultMaxDomains {
		m.KeepAcceptAll(ctx, fmt.Sprintf("mail-%06d.example.com", i), evs.SMTPRejected)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		m.AcceptAll(ctx, fmt.Sprintf("mail-%06d.example.com", i%cache.DefaultMaxDomains))
	}
}

// TestFactsGreyDelay: a learned greylisting delay is kept for the TTL;
// a later one replaces it.
func TestFactsGreyDelay(t *testing.T) {
	ctx := context.Background()
	clock := testkit.NewClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	m := cache.NewFacts(cache.FactsConfig{TTL: time.Hour, Now: clock.Now})
	m.KeepGreyDelay(ctx, "grey.example", 15*time.Minute)
	m.KeepGreyDelay(ctx, "zero.example", 0) // nothing learned
	clock.Advance(30 * time.Minute)
	m.KeepGreyDelay(ctx, "grey.example", 5*time.Minute)
	for _, tc := range []struct {
		domain  string
		advance time.Duration
		want    time.Duration
		ok      bool
	}{
		{"grey.example", 0, 5 * time.Minute, true},
		{"zero.example", 0, 0, false},
		{"grey.example", 59 * time.Minute, 5 * time.Minute, true},
		{"grey.example", time.Minute, 0, false},
	} {
		clock.Advance(tc.advance)
		if got, ok := m.GreyDelay(ctx, tc.domain); got != tc.want || ok != tc.ok {
			t.Errorf("GreyDelay(%s) = %v, %v; want %v, %v", tc.domain, got, ok, tc.want, tc.ok)
		}
	}
}
