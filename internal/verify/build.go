package verify

import (
	"context"
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
	return BuildTimed(c, nil)
}

// BuildTimed is Build with every mail-domain lookup of the engine timed by
// lookup (metrics), when lookup is not nil.
func BuildTimed(c config.Config, lookup func(time.Duration)) (*Engine, *dnscheck.Resolver, error) {
	return BuildWith(c, BuildOptions{Lookup: lookup})
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
}

// BuildWith is Build with the dependencies of o.
func BuildWith(c config.Config, o BuildOptions) (*Engine, *dnscheck.Resolver, error) {
	res, err := dnscheck.New(dnscheck.Config{Servers: c.DNSServers})
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
			// The proxy is the operator's, often on a private network:
			// reaching it is not subject to the policy; what it is asked
			// to CONNECT to is.
			dialer, err = smtpprobe.NewSOCKS5Dialer(c.SMTPProxy, &net.Dialer{}, c.Egress)
			if err != nil {
				return nil, nil, err
			}
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
