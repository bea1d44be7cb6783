package verify

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/evs-dev/evs/internal/config"
)

// The egress self-check (docs/operations.md): what receivers check of us
// before they answer about a mailbox (our egress address on a DNS
// blocklist, our HELO name and that address not naming each other), asked
// of DNS directly, at start and hourly on both deployments.

// Reputation is the DNS side of the self-check; the engine's resolver
// (NewResolver, *dnscheck.Resolver) is one.
type Reputation interface {
	Blocklisted(ctx context.Context, ip netip.Addr, zone string) Listing
	ConfirmHELO(ctx context.Context, name string, ip netip.Addr) HELOCheck
}

// Egress is one way our probes leave: the direct egress, or one SOCKS
// exit.
type Egress struct {
	// Name labels it (config.Config.EgressName, or the exit's name):
	// never credentials.
	Name string
	// IP is the public address its connections leave from; the zero Addr
	// when not known.
	IP netip.Addr
	// NoIP says which setting would give IP, for the check's note when
	// it is not known.
	NoIP string
}

// DirectEgress is c's egress as one: named by config.Config.EgressName,
// its address EVS_SMTP_EGRESS_IP.
func DirectEgress(c config.Config) Egress {
	return Egress{Name: c.EgressName(), IP: c.EgressIP, NoIP: "EVS_SMTP_EGRESS_IP is not set"}
}

// ExitEgresses returns one Egress per SOCKS exit, in their order.
func ExitEgresses(exits []config.SMTPExit) []Egress {
	out := make([]Egress, len(exits))
	for i, x := range exits {
		out[i] = Egress{Name: x.Name, IP: x.EgressIP, NoIP: "EVS_SMTP_EGRESS_IP is not set"}
		if len(exits) > 1 {
			// One address cannot be every exit's (config.Config.setExits).
			out[i].NoIP = "this exit has no #egress-ip in EVS_SMTP_PROXY"
		}
	}
	return out
}

// EgressCheck is one self-check's findings for one egress.
type EgressCheck struct {
	// At is when the check ran.
	At time.Time `json:"-"`
	// Address is the egress address checked, when known.
	Address string `json:"address,omitempty"`
	// Blocklists are what each zone said of Address (empty when it is
	// not known).
	Blocklists []Listing `json:"blocklists"`
	// HELO is what DNS says of the HELO name (nil when none is set).
	HELO *HELOCheck `json:"helo,omitempty"`
	// Note says what was not checked, and why.
	Note string `json:"note,omitempty"`
}

// CheckEgress runs one self-check of e: its address against each
// blocklist zone, and helo (when set) against its address.
func CheckEgress(ctx context.Context, rep Reputation, e Egress, zones []string, helo string, now time.Time) EgressCheck {
	c := EgressCheck{At: now, Blocklists: []Listing{}}
	if e.IP.IsValid() {
		c.Address = e.IP.String()
		for _, z := range zones {
			c.Blocklists = append(c.Blocklists, rep.Blocklisted(ctx, e.IP, z))
		}
	} else if len(zones) > 0 {
		c.Note = e.NoIP + ": the blocklists and the reverse DNS are not checked"
	}
	if helo != "" {
		h := rep.ConfirmHELO(ctx, helo, e.IP)
		c.HELO = &h
	}
	return c
}

// Listed returns the zones that list the address.
func (c EgressCheck) Listed() []Listing {
	var out []Listing
	for _, l := range c.Blocklists {
		if l.Listed {
			out = append(out, l)
		}
	}
	return out
}

// Warn logs, as warnings, what in c receivers will refuse us for. The
// egress address is ours, not a user's: it may be logged.
func (c EgressCheck) Warn(log *slog.Logger, egress string) {
	for _, l := range c.Listed() {
		log.Warn("the egress address is on a DNS blocklist: receivers will refuse our probes (unknown/blocked)",
			slog.String("egress", egress), slog.String("address", c.Address), slog.String("list", l.Zone), slog.Any("codes", l.Codes))
	}
	if c.HELO != nil && !c.HELO.OK {
		log.Warn("the HELO name fails the checks receivers make: set EVS_SMTP_HELO to a name that resolves to this host's public IP and whose PTR points back (see README: SMTP probing)",
			slog.String("egress", egress), slog.String("detail", c.HELO.Detail))
	}
}
