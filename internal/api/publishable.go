package api

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// The default limits of a publishable key, calls a minute: per client
// address (a /64 for IPv6) with the key (EVS_PUBLISHABLE_RATE_PER_ADDRESS),
// and per key (EVS_PUBLISHABLE_RATE); a key may have its own
// (evs.Key.Limits). `evs serve` counts them at its edge; on AWS the verify
// function counts them in the store (Deps.PublishableLimits).
const (
	PublishablePerAddress = 10
	PublishablePerKey     = 600
)

// PublishableLimits are publishable keys' calls a minute, per client
// address and per key; a zero field counts nothing.
type PublishableLimits struct {
	PerAddress, PerKey int
}

// PublishableDefaults are the limits of c for a key that has none of its
// own; a Config not read from the environment (0) has the defaults.
func PublishableDefaults(c config.Config) PublishableLimits {
	return PublishableLimits{PerAddress: cmp.Or(c.PublishableRatePerAddress, PublishablePerAddress), PerKey: cmp.Or(c.PublishableRate, PublishablePerKey)}
}

// Of returns the limits of p's key: its own where it has them, else l's.
func (l PublishableLimits) Of(p evs.Principal) PublishableLimits {
	return PublishableLimits{PerAddress: cmp.Or(p.Limits.PerAddress, l.PerAddress), PerKey: cmp.Or(p.Limits.PerKey, l.PerKey)}
}

// publishablePeriod prefixes the counters of publishable keys, so they
// never meet an address quota's or the Idempotency-Key limit's.
const publishablePeriod = "publishable/"

// PublishableQuota is a Quota store that charges a publishable key's call
// in two writes (DynamoDB, 1 WRU each), not a marked charge per counter:
// the client address's minute (CountCall), then, once the call is valid,
// the key's minute with the quota and its share (ChargePublishable).
type PublishableQuota interface {
	CountCall(ctx context.Context, accountID, counter, window string, limit int, expires time.Time) (bool, error)
	ChargePublishable(ctx context.Context, c store.CallCharge) (refused string, err error)
	RefundPublishable(ctx context.Context, accountID, period string, n int) error
}

// limitPublishable charges a publishable key's call to its client
// address's minute; chargeQuota charges the key's with the quota, once the
// call is valid: one client's flood does not shut the form for everyone.
// Over either, the call is 429.
func (h *Handler) limitPublishable(ctx context.Context, p evs.Principal) error {
	pq, ok := h.d.Quota.Store.(PublishableQuota)
	if p.Kind != evs.KeyPublishable || !ok || h.d.PublishableLimits == (PublishableLimits{}) {
		return nil
	}
	l := h.d.PublishableLimits.Of(p)
	if l.PerAddress <= 0 {
		return nil
	}
	now := h.d.Now().UTC()
	start := now.Truncate(time.Minute)
	end := start.Add(time.Minute)
	client := ClientPrefix(CallFromContext(ctx).ClientAddr)
	if ok, err := pq.CountCall(ctx, p.AccountID, p.KeyID+"/"+client, start.Format("2006-01-02T15:04"), l.PerAddress, end.Add(counterGrace)); err != nil {
		return fmt.Errorf("api: count a publishable key's call: %w", err)
	} else if !ok {
		return &store.LimitError{Err: evs.Errorf(evs.CodeRateLimited, "Too many calls from this address with a publishable key (%d a minute); retry after the time in Retry-After.", l.PerAddress), Retry: end.Sub(now)}
	}
	return nil
}

// ClientPrefix names a client address as the limits count it, here and at
// `evs serve`'s edge: an IPv4 address alone, an IPv6 one by its /64 (one
// host may hold all of it).
func ClientPrefix(a netip.Addr) string {
	if !a.IsValid() || a.Is4() || a.Is4In6() {
		return a.Unmap().String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}
