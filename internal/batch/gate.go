package batch

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/evs-dev/evs/internal/backoff"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// PreferredMX names the mail host a domain's SMTP session goes to first
// (the verification engine answers it from its DNS cache).
type PreferredMX interface {
	PreferredMX(ctx context.Context, domain string) (host string, ok bool)
}

// Gate is evs serve's politeness per mail provider and egress address,
// the same rules the AWS worker keeps in DynamoDB (contract, section 14),
// kept in memory because one process opens every session: at most
// Limits' sessions open at once per provider, RCPT commands paced to
// Limits' rate a minute (a token bucket, so no minute sees more), and a
// pause for every batch after a 421 or a rate reply, doubling from
// PauseBase to PauseMax, ended by the next clean session.
type Gate struct {
	// MX finds a domain's provider before its session opens; nil keys
	// limits by the domain itself.
	MX PreferredMX
	// Limits are EVS_PROVIDER_SESSIONS and EVS_PROVIDER_RCPT_PER_MIN.
	Limits Limits
	// Egress names the address sessions leave from (the proxy's host, or
	// "direct"): limits are per provider and egress address.
	Egress string
	// PauseBase and PauseMax shape the back-off (defaults 1 min, 15 min).
	PauseBase, PauseMax time.Duration
	// Now is the clock of its pacing (default time.Now): waits are real
	// time even where a runner's timestamps come from a test's clock.
	Now func() time.Time

	mu   sync.Mutex
	keys map[string]*gateKey
}

// gateKey is the state of one provider and egress address.
type gateKey struct {
	sessions, limit int
	freed           chan struct{} // closed and replaced when a session ends
	rcpt            *rate.Limiter
	pausedUntil     time.Time
	level           int // pauses in a row
}

// Admission is what a group may do now.
type Admission struct {
	// Run may open its session now; Rest waits for Until (the zero time:
	// at once, as a new group).
	Run, Rest []evs.Item
	Until     time.Time
	// Done ends Run's session: it frees the slot and, when the provider
	// throttled us, pauses it and returns the pause's end.
	Done func(throttled bool) (pausedUntil time.Time)
}

func (g *Gate) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// until is the wait from now to t on the gate's clock (0 for the zero
// time or the past).
func (g *Gate) until(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return max(t.Sub(g.now()), 0)
}

func (g *Gate) pauseBase() time.Duration { return orDur(g.PauseBase, time.Minute) }
func (g *Gate) pauseMax() time.Duration  { return max(orDur(g.PauseMax, 15*time.Minute), g.pauseBase()) }

func orDur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Key names the politeness key of a domain's group: the provider of its
// preferred MX host and the egress address.
func (g *Gate) Key(ctx context.Context, domain string) string {
	host := domain
	if g.MX != nil {
		if h, ok := g.MX.PreferredMX(ctx, domain); ok {
			host = h
		}
	}
	return PoliteKey(host, g.Egress)
}

// PoliteKey is the key politeness limits are kept under, on both
// deployments: the provider an MX host belongs to (verify.ProviderKey)
// and the egress address sessions leave from ("" is "direct").
func PoliteKey(host, egress string) string {
	if egress == "" {
		egress = "direct"
	}
	return verify.ProviderKey(host) + "|" + egress
}

// Admit waits for a session slot of key and for RCPT commands enough for
// as many of items as a minute's budget allows (the rest come back in
// Rest, to run as a group of their own). A paused provider admits nothing:
// every item comes back with Until set to the pause's end. It returns
// ctx's error when ctx ends first.
func (g *Gate) Admit(ctx context.Context, key string, items []evs.Item, p *Processor) (Admission, error) {
	sessions, rcptPerMin := g.Limits.ForKey(key)
	for {
		g.mu.Lock()
		k := g.state(key, sessions, rcptPerMin)
		now := g.now()
		if k.pausedUntil.After(now) {
			g.mu.Unlock()
			return Admission{Rest: items, Until: k.pausedUntil, Done: func(bool) time.Time { return time.Time{} }}, nil
		}
		if k.sessions < k.limit {
			k.sessions++
			g.mu.Unlock()
			return g.rcpts(ctx, key, k, items, p)
		}
		freed := k.freed
		g.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return Admission{}, ctx.Err()
		}
	}
}

// rcpts takes the RCPT commands of the part of items that fits a minute's
// budget, waiting for them, with the session slot already held.
func (g *Gate) rcpts(ctx context.Context, key string, k *gateKey, items []evs.Item, p *Processor) (Admission, error) {
	a := Admission{Run: items}
	if burst := k.rcpt.Burst(); p.RcptBound(len(items)) > burst {
		n := max(p.ItemsWithin(burst), 1)
		a.Run, a.Rest = items[:n], items[n:]
	}
	r := k.rcpt.ReserveN(g.now(), min(p.RcptBound(len(a.Run)), k.rcpt.Burst()))
	a.Done = func(throttled bool) time.Time { return g.done(key, k, throttled) }
	if d := r.DelayFrom(g.now()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			r.Cancel()
			a.Done(false)
			return Admission{}, ctx.Err()
		}
	}
	return a, nil
}

// state returns key's entry, made on first use; g.mu is held.
func (g *Gate) state(key string, sessions, rcptPerMin int) *gateKey {
	if g.keys == nil {
		g.keys = make(map[string]*gateKey)
	}
	k := g.keys[key]
	if k == nil {
		k = &gateKey{limit: sessions, freed: make(chan struct{}),
			rcpt: rate.NewLimiter(rate.Limit(float64(rcptPerMin)/60), rcptPerMin)}
		g.keys[key] = k
	}
	return k
}

// done ends a session of key.
func (g *Gate) done(key string, k *gateKey, throttled bool) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	k.sessions--
	close(k.freed)
	k.freed = make(chan struct{})
	now := g.now()
	switch {
	case throttled:
		// Sessions that ran side by side may all meet the same refusal:
		// one pause, not one doubling each.
		if !k.pausedUntil.After(now) {
			k.level++
			k.pausedUntil = now.Add(backoff.Double(g.pauseBase(), g.pauseMax(), k.level-1))
		}
		return k.pausedUntil
	case !k.pausedUntil.After(now):
		k.level = 0
	}
	// Forget a key nobody uses that holds nothing worth keeping, so the
	// map stays as small as the set of providers being probed.
	if k.sessions == 0 && k.level == 0 && k.rcpt.TokensAt(now) >= float64(k.rcpt.Burst()) {
		delete(g.keys, key)
	}
	return time.Time{}
}
