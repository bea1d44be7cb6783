package batch

import (
	"strings"

	"github.com/evs-dev/evs/internal/verify"
)

// Default limits per class, per (provider, egress address): see
// docs/aws.md, Politeness, for why.
var (
	DefaultSessions   = map[string]int{verify.ClassLarge: 10, verify.ClassGateway: 4, verify.ClassOther: 2}
	DefaultRcptPerMin = map[string]int{verify.ClassLarge: 300, verify.ClassGateway: 120, verify.ClassOther: 60}
)

// Limits are the politeness limits per provider: EVS_PROVIDER_SESSIONS
// and EVS_PROVIDER_RCPT_PER_MIN as config parses them. A map's keys are
// provider names, class names and "*" (every provider); the most specific
// wins, and the class defaults fill in the rest.
type Limits struct {
	Sessions   map[string]int
	RcptPerMin map[string]int
}

// For returns the session and RCPT-per-minute limits of a provider key.
func (l Limits) For(provider string) (sessions, rcptPerMin int) {
	class := verify.ProviderClass(provider)
	pick := func(m, def map[string]int) int {
		for _, k := range []string{provider, class, "*"} {
			if n, ok := m[k]; ok && n > 0 {
				return n
			}
		}
		return def[class]
	}
	return pick(l.Sessions, DefaultSessions), pick(l.RcptPerMin, DefaultRcptPerMin)
}

// ForKey returns the limits of a politeness key (PoliteKey): those of
// its provider.
func (l Limits) ForKey(key string) (sessions, rcptPerMin int) {
	provider := key
	if i := strings.LastIndex(key, "|"); i >= 0 {
		provider = key[:i]
	}
	return l.For(provider)
}

// RcptBound is the most RCPT commands a group of n addresses sends: one
// per address, and at most one accept-all probe per session (the engine
// sends it only when an address was accepted and the domain's answer is
// not known to the engine's domain facts), with a session per PerConnection addresses.
func (p *Processor) RcptBound(n int) int {
	if n <= 0 {
		return 0
	}
	per := p.perConnection()
	return n + (n+per-1)/per
}

// ItemsWithin is the most addresses of a group whose RcptBound fits in
// budget RCPT commands.
func (p *Processor) ItemsWithin(budget int) int {
	per := p.perConnection()
	// n + ceil(n/per) <= budget  ⇐  n = budget - ceil(budget/(per+1))
	n := budget - (budget+per)/(per+1)
	for n > 0 && p.RcptBound(n) > budget {
		n--
	}
	return max(n, 0)
}

func (p *Processor) perConnection() int {
	if p.PerConnection <= 0 {
		return 50
	}
	return p.PerConnection
}
