// Package politeness keeps SMTP polite to the mail providers we probe, by
// one set of rules on both deployments: limits per mail provider and
// egress address (sessions open at once, RCPT commands a minute), and a
// pause after a 421 or a rate reply, doubling while they follow each
// other. Gate applies the rules; its State keeps what they need, in memory
// for evs serve or in DynamoDB shared by every AWS invocation.
package politeness

import (
	"cmp"
	"context"
	"math"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/verify"
)

// PreferredMX names the mail host a domain's SMTP session goes to first
// (*verify.Engine answers it from its DNS cache): its provider is the one
// the limits are about.
type PreferredMX interface {
	PreferredMX(ctx context.Context, domain string) (host string, ok bool)
}

// Key is the key limits are kept under: the provider of MX host host
// (verify.ProviderKey) and the egress address sessions leave from ("" is
// "direct"), as "<provider>|<egress>".
func Key(host, egress string) string {
	egress = cmp.Or(egress, "direct")
	return verify.ProviderKey(host) + "|" + egress
}

// Default limits per class, per provider and egress address: see
// docs/aws.md, Politeness, for why.
var (
	DefaultSessions   = map[string]int{verify.ClassLarge: 10, verify.ClassGateway: 4, verify.ClassOther: 2}
	DefaultRcptPerMin = map[string]int{verify.ClassLarge: 300, verify.ClassGateway: 120, verify.ClassOther: 60}
)

// Limits are the limits per provider. A map's keys are provider names,
// class names and "*"; the most specific wins, and the class defaults fill
// in the rest.
type Limits struct {
	Sessions   map[string]int
	RcptPerMin map[string]int
}

// For returns the session and RCPT-per-minute limits of a provider.
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

// ForKey returns the limits of a key (Key): those of its provider.
func (l Limits) ForKey(key string) (sessions, rcptPerMin int) {
	provider := key
	if i := strings.LastIndex(key, "|"); i >= 0 {
		provider = key[:i]
	}
	return l.For(provider)
}

// EgressOf is the egress address of a key (Key).
func EgressOf(key string) string { return key[strings.LastIndex(key, "|")+1:] }

// Double returns base doubled n times, at most most (most <= 0: no bound);
// n <= 0 gives base. It is the one rule for every growing wait (pauses,
// greylisting retries, store-fault retries), so they cannot drift apart.
func Double(base, most time.Duration, n int) time.Duration {
	most = cmp.Or(max(most, 0), math.MaxInt64)
	d := base
	for i := 0; i < n && d < most; i++ {
		if d > math.MaxInt64/2 {
			return most
		}
		d *= 2
	}
	return min(d, most)
}

// SessionAddresses is the most addresses one SMTP session asks about (the
// batch worker's default; batch.Processor.PerConnection).
const SessionAddresses = 100

// Rcpts is the most RCPT commands n addresses send in sessions of at most
// per addresses: one each, and one accept-all probe a session. A budget
// counts what this says, so a reservation and an estimate agree.
func Rcpts(n, per int) int {
	if n <= 0 {
		return 0
	}
	return n + (n+per-1)/per
}
