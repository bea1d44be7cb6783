package verify

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// Build returns the verification engine the configuration describes, and
// its resolver (evs serve also uses it to check the EHLO name).
func Build(c config.Config) (*Engine, *dnscheck.Resolver, error) {
	return BuildWith(c, BuildOptions{})
}

// NewResolver returns the resolver the configuration describes, as Build
// makes it: for a caller whose engine was made otherwise (tests) and who
// still asks DNS what receivers ask of us (the egress self-check).
func NewResolver(c config.Config) (*dnscheck.Resolver, error) {
	return dnscheck.New(dnscheck.Config{Servers: c.DNSServers})
}

// Listing and HELOCheck are the self-check's findings (package dnscheck
// asks the questions), named here for callers outside the engine.
type (
	Listing   = dnscheck.Listing
	HELOCheck = dnscheck.HELOCheck
)

// Exits is the dialer over the SOCKS exits (NewExits), named here for
// callers outside the engine.
type Exits = smtpprobe.Exits

// WithExit returns ctx whose SMTP sessions go through the exit named name
// while it is in rotation (smtpprobe.WithExit).
func WithExit(ctx context.Context, name string) context.Context { return smtpprobe.WithExit(ctx, name) }

// HostProvider names the provider of MX host by its name alone ("other"
// when no known provider's): the provider an exit is avoided for, since
// the dialer sees no reply.
func HostProvider(host string) string { return string(smtpprobe.ProviderOf(host)) }

// BuildOptions are the dependencies of the engine that the configuration
// does not describe.
type BuildOptions struct {
	// Lookup, when set, times every mail-domain lookup (metrics).
	Lookup func(time.Duration)
	// Facts keeps what the accept-all probe learns about each domain
	// (default: this process's memory, cache.NewFacts with its
	// defaults); the AWS functions put a DynamoDB item behind it.
	Facts DomainFacts
	// Gate, when set, admits Verify's SMTP sessions (Config.Gate): the
	// gate the deployment's batches go through.
	Gate Gate
	// Exits, when set, is the dialer over the SOCKS exits (EVS_SMTP=proxy):
	// evs serve makes it (NewExits) to show and steer their health. Else
	// Build makes one, telling ExitHealth (when set) each health verdict.
	Exits      *smtpprobe.Exits
	ExitHealth func(exit int, name string, up bool)
}

// NewExits returns the dialer over the configuration's SOCKS exits
// (config.Config.SMTPExits): each provider (ProviderKey) prefers one
// exit in rotation, and health is told each health verdict (nil: nobody).
func NewExits(c config.Config, health func(exit int, name string, up bool)) (*smtpprobe.Exits, error) {
	exits := c.SMTPExits
	if len(exits) == 0 && c.SMTPProxy != "" {
		// A Config made in code rather than read (FromEnv, SetSMTPProxy).
		var err error
		if exits, err = config.ParseSMTPExits(c.SMTPProxy); err != nil {
			return nil, fmt.Errorf("EVS_SMTP_PROXY: %w", err)
		}
	}
	return smtpprobe.NewExits(smtpprobe.ExitsConfig{
		Exits: exits, Policy: c.Egress,
		Key: ProviderKey, Observe: health, Timeout: c.ExitTimeout, Canary: c.ExitCanary,
	})
}

// BuildWith is Build with the dependencies of o.
func BuildWith(c config.Config, o BuildOptions) (*Engine, *dnscheck.Resolver, error) {
	res, err := NewResolver(c)
	if err != nil {
		return nil, nil, err
	}
	ec := Config{Resolver: res, Facts: o.Facts, Gate: o.Gate}
	if ec.Facts == nil {
		ec.Facts = cache.NewFacts(cache.FactsConfig{})
	}
	if o.Lookup != nil {
		ec.Resolver = timedResolver{res, o.Lookup}
	}
	switch c.SMTP {
	case config.SMTPOff:
		ec.SMTPOffDetail = "SMTP probing is off here (EVS_SMTP=off)"
	default:
		// The policy is checked before every dial and again, on direct
		// dials, on the address the socket connects to.
		var dialer smtpprobe.ContextDialer = &net.Dialer{Control: c.Egress.Control}
		if c.SMTP == config.SMTPProxy {
			exits := o.Exits
			if exits == nil {
				if exits, err = NewExits(c, o.ExitHealth); err != nil {
					return nil, nil, err
				}
			}
			dialer = exits
		}
		p, err := smtpprobe.New(smtpprobe.Config{
			HELO: c.HELO, MailFrom: c.MailFrom, Port: c.SMTPPort,
			Resolver: res, Dialer: dialer, Egress: c.Egress,
		})
		if err != nil {
			return nil, nil, err
		}
		ec.Prober = SMTP(p)
	}
	e, err := New(ec)
	if err != nil {
		return nil, nil, err
	}
	return e, res, nil
}

// timedResolver times each lookup of the resolver it wraps.
type timedResolver struct {
	r      Resolver
	lookup func(time.Duration)
}

func (t timedResolver) LookupMail(ctx context.Context, domain string) dnscheck.MailResult {
	start := time.Now()
	res := t.r.LookupMail(ctx, domain)
	t.lookup(time.Since(start))
	return res
}
