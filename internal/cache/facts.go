package cache

import (
	"cmp"
	"context"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// Defaults of FactsConfig.
const (
	// DefaultMaxDomains bounds the domains kept: 16 MB when full (170
	// bytes a domain, BenchmarkFactsFull; docs/cache.md), and more
	// domains than a day of sign-ups and batches of a busy service reach.
	DefaultMaxDomains = 100_000
	// DefaultFactsTTL is how long an answer is trusted. Whether a domain
	// accepts any address is a setting of its mail server, changed
	// rarely (a migration, a new provider): six hours reuses an answer
	// across a working day's batches and sign-ups, and a change shows in
	// verdicts the same day.
	DefaultFactsTTL = 6 * time.Hour
)

// FactsConfig configures a Facts.
type FactsConfig struct {
	// MaxDomains bounds the domains kept, the least recently used
	// forgotten first (default DefaultMaxDomains).
	MaxDomains int
	// TTL is how long an answer or a greylisting delay is kept (default
	// DefaultFactsTTL).
	TTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Count, when set, is told of each lookup: "hit" or "miss"
	// (evs_domain_facts_total).
	Count func(result string)
}

// Facts keeps public facts about mail domains in this process, bounded and
// with a TTL, shared by every account: the answer of a domain's accept-all
// probe, and how long after greylisting us its server let a retry through
// (verify.DomainFacts). Never anything about an address.
type Facts struct {
	c     *LRU[string]
	grey  *LRU[time.Duration]
	ttl   time.Duration
	now   func() time.Time
	count func(string)
}

// NewFacts returns an empty Facts.
func NewFacts(cfg FactsConfig) *Facts {
	cfg.MaxDomains = cmp.Or(max(cfg.MaxDomains, 0), DefaultMaxDomains)
	cfg.TTL = cmp.Or(max(cfg.TTL, 0), DefaultFactsTTL)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Count == nil {
		cfg.Count = func(string) {}
	}
	return &Facts{c: NewLRU[string](cfg.MaxDomains), grey: NewLRU[time.Duration](cfg.MaxDomains),
		ttl: cfg.TTL, now: cfg.Now, count: cfg.Count}
}

// Conclusive tells whether result is an accept-all answer worth keeping:
// accepted (any address is) or rejected (unknown ones are). A timeout or a
// greylisting says nothing about the domain.
func Conclusive(result string) bool {
	return result == evs.SMTPAccepted || result == evs.SMTPRejected
}

// AcceptAll returns the remembered accept-all answer of domain.
func (m *Facts) AcceptAll(_ context.Context, domain string) (string, bool) {
	r, ok := m.c.Get(domain, m.now())
	if ok {
		m.count("hit")
	} else {
		m.count("miss")
	}
	return r, ok
}

// KeepAcceptAll remembers a conclusive answer for TTL; others are ignored.
func (m *Facts) KeepAcceptAll(_ context.Context, domain, result string) {
	m.Remember(domain, result, m.now().Add(m.ttl))
}

// Remember keeps a conclusive answer read from a tier behind the memory
// until its own expiry.
func (m *Facts) Remember(domain, result string, expires time.Time) {
	if !Conclusive(result) {
		return
	}
	now := m.now()
	m.c.Put(domain, result, now, expires.Sub(now))
}

// GreyDelay returns how long after greylisting us the domain's server let
// a retry through, when a batch learned it (batch.GreyFacts).
func (m *Facts) GreyDelay(_ context.Context, domain string) (time.Duration, bool) {
	return m.grey.Get(domain, m.now())
}

// KeepGreyDelay remembers that a retry d after the domain's server
// greylisted us got through.
func (m *Facts) KeepGreyDelay(_ context.Context, domain string, d time.Duration) {
	m.RememberGreyDelay(domain, d, m.now().Add(m.ttl))
}

// RememberGreyDelay keeps a greylisting delay until expires, as Remember
// keeps an answer read from a tier behind the memory.
func (m *Facts) RememberGreyDelay(domain string, d time.Duration, expires time.Time) {
	if d <= 0 {
		return
	}
	now := m.now()
	m.grey.Put(domain, d, now, expires.Sub(now))
}

// TTL is how long a new answer is kept.
func (m *Facts) TTL() time.Duration { return m.ttl }

// Now is the memory's clock.
func (m *Facts) Now() time.Time { return m.now() }

// Len reports the domains held, expired ones not yet evicted included.
func (m *Facts) Len() int { return m.c.Len() }
