package api

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// The default limits of a publishable key, calls a minute: per client
// address (a /64 for IPv6) with the key, and per key; a key may have its
// own (evs.Key.Limits). `evs serve` counts them at its edge; on AWS the
// verify function counts them in the store (Deps.PublishableLimits).
const (
	PublishablePerAddress = 10
	PublishablePerKey     = 600
)

// PublishableLimits are publishable keys' calls a minute, per client
// address and per key; a zero field counts nothing.
type PublishableLimits struct {
	PerAddress, PerKey int
}

// DefaultPublishableLimits are the limits of a key that has none of its
// own.
var DefaultPublishableLimits = PublishableLimits{PerAddress: PublishablePerAddress, PerKey: PublishablePerKey}

// Of returns the limits of p's key: its own where it has them, else l's.
func (l PublishableLimits) Of(p evs.Principal) PublishableLimits {
	return PublishableLimits{PerAddress: cmp.Or(p.Limits.PerAddress, l.PerAddress), PerKey: cmp.Or(p.Limits.PerKey, l.PerKey)}
}

// publishablePeriod prefixes the counters of publishable keys, so they
// never meet an address quota's or the Idempotency-Key limit's.
const publishablePeriod = "publishable/"

// limitPublishable charges a publishable key's call to its client
// address's minute, then to the key's: one client's flood does not shut
// the form for everyone. Over either, the call is 429.
func (h *Handler) limitPublishable(ctx context.Context, p evs.Principal) error {
	if p.Kind != evs.KeyPublishable || h.d.Quota.Store == nil || h.d.PublishableLimits == (PublishableLimits{}) {
		return nil
	}
	l := h.d.PublishableLimits.Of(p)
	now := h.d.Now().UTC()
	start := now.Truncate(time.Minute)
	end, minute := start.Add(time.Minute), start.Format("2006-01-02T15:04")
	if l.PerAddress > 0 {
		client := clientPrefix(CallFromContext(ctx).ClientAddr)
		_, err := h.charge(ctx, p.AccountID, "publishable key's per-address limit", publishablePeriod+"addr/"+p.KeyID+"/"+client+"/"+minute, 1, l.PerAddress, now, end, func() string {
			return fmt.Sprintf("Too many calls from this address with a publishable key (%d a minute); retry after the time in Retry-After.", l.PerAddress)
		})
		if err != nil {
			return err
		}
	}
	if l.PerKey > 0 {
		_, err := h.charge(ctx, p.AccountID, "publishable key's limit", publishablePeriod+"key/"+p.KeyID+"/"+minute, 1, l.PerKey, now, end, func() string {
			return fmt.Sprintf("Too many calls with this publishable key (%d a minute); retry after the time in Retry-After.", l.PerKey)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// clientPrefix names a client address as the limits count it: an IPv4
// address alone, an IPv6 one by its /64 (one host may hold all of it).
func clientPrefix(a netip.Addr) string {
	if !a.IsValid() || a.Is4() || a.Is4In6() {
		return a.Unmap().String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}
