// Package dnscheck is the DNS stage of the verification engine: it finds the
// mail hosts of a domain (MX, null MX, implicit MX) and the addresses of a
// host, with the caching, retries and failure reporting that verdicts rely
// on. A failure to resolve is always reported as an error outcome, never as
// "no such domain", because a real address wrongly called undeliverable
// costs a customer.
package dnscheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/singleflight"

	"github.com/evs-dev/evs/internal/cache"
)

// Outcome classifies what DNS says about a domain's mail hosts.
type Outcome string

// Outcomes of LookupMail.
const (
	OutcomeOK        Outcome = "ok"         // MX hosts found (or implicit MX from A/AAAA)
	OutcomeNXDomain  Outcome = "nxdomain"   // the domain does not exist
	OutcomeNullMX    Outcome = "null_mx"    // RFC 7505: the domain accepts no mail
	OutcomeNoRecords Outcome = "no_records" // NOERROR but no MX and no A/AAAA
	OutcomeError     Outcome = "error"      // SERVFAIL, REFUSED, timeout, network
)

// MX is one mail exchanger. Host is lower-case without the trailing dot.
type MX struct {
	Host string
	Pref uint16
}

// MailResult is what LookupMail found for a domain.
type MailResult struct {
	Domain   string
	Outcome  Outcome
	MX       []MX   // by Pref, then Host; for an implicit MX the domain itself
	Implicit bool   // no MX: the domain's own A/AAAA stand in (RFC 5321, 5.1)
	Rcode    string // the DNS response code behind the outcome, "" without a reply
	// Err is set when Outcome is OutcomeError: "servfail", "refused",
	// "timeout", "network", or "invalid" for a name DNS cannot carry.
	Err string
}

// clone copies r so callers cannot modify cached data.
func (r MailResult) clone() MailResult {
	r.MX = slices.Clone(r.MX)
	return r
}

// Dialer opens connections to DNS servers; *net.Dialer satisfies it. For
// "udp" the connection must also be a net.PacketConn, as *net.UDPConn is,
// so that replies are read as datagrams.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config configures a Resolver. Zero values get the documented defaults.
type Config struct {
	// Servers are "host:port" recursive resolvers, tried in order. Empty
	// means the nameservers of /etc/resolv.conf, or 127.0.0.1:53.
	Servers   []string
	Timeout   time.Duration // of one query attempt against one server; default 2s
	Attempts  int           // rounds over all servers a query gets; default 2
	Now       func() time.Time
	CacheSize int    // names per cache; default 10000, negative: no caching
	Dialer    Dialer // default a zero net.Dialer
}

// Cache lifetimes. Positive answers live for their TTL within
// [minCacheTTL, maxCacheTTL]; negative ones for the SOA-derived TTL of RFC
// 2308 or defaultNegTTL. Failures are not cached.
const (
	minCacheTTL   = 5 * time.Second
	maxCacheTTL   = time.Hour
	defaultNegTTL = 5 * time.Minute
)

const resolvConf = "/etc/resolv.conf"

// Resolver looks up mail hosts and host addresses. It is safe for
// concurrent use; identical lookups in flight at the same time share one
// set of queries.
type Resolver struct {
	servers  []string
	timeout  time.Duration
	attempts int
	now      func() time.Time
	dialer   Dialer
	budget   time.Duration // upper bound for one shared lookup

	mail    *cache.LRU[MailResult]
	hosts   *cache.LRU[hostResult]
	flights singleflight.Group
}

// hostResult is a cached LookupHost answer: addresses, or none.
type hostResult struct {
	addrs []netip.Addr
	nx    bool // NXDOMAIN rather than no addresses
}

// New returns a Resolver for cfg. It fails when a server address is
// malformed.
func New(cfg Config) (*Resolver, error) {
	r := &Resolver{
		timeout:  cmp.Or(max(cfg.Timeout, 0), 2*time.Second),
		attempts: cmp.Or(max(cfg.Attempts, 0), 2),
		now:      cfg.Now,
		dialer:   cfg.Dialer,
	}
	if r.now == nil {
		r.now = time.Now
	}
	for i, s := range cfg.Servers { // normalised by config.ParseDNSServers
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("dnscheck: DNS server %d: %q is not host:port", i+1, s)
		}
		r.servers = append(r.servers, s)
	}
	if len(r.servers) == 0 {
		r.servers = systemServers(resolvConf)
	}
	switch size := cfg.CacheSize; {
	case size == 0:
		size = 10000
		fallthrough
	case size > 0:
		r.mail = cache.NewLRU[MailResult](size)
		r.hosts = cache.NewLRU[hostResult](size)
	}
	// A mail lookup is at most an MX query then A and AAAA in parallel;
	// each tries every server in every attempt with up to three exchanges
	// (UDP, UDP without EDNS0, TCP), each bounded by the timeout.
	r.budget = 2 * 3 * time.Duration(r.attempts*len(r.servers)) * r.timeout
	return r, nil
}

// systemServers reads the resolvers from resolv.conf; without one, a local
// resolver is the only sensible guess.
func systemServers(path string) []string {
	conf, err := dns.ClientConfigFromFile(path)
	if err != nil || len(conf.Servers) == 0 {
		return []string{"127.0.0.1:53"}
	}
	out := make([]string, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		out = append(out, net.JoinHostPort(s, conf.Port))
	}
	return out
}

// Servers returns the resolvers in use, in the order they are tried.
func (r *Resolver) Servers() []string { return slices.Clone(r.servers) }

// normalize lower-cases name and drops a trailing dot; ok is false for
// names DNS cannot carry.
func normalize(name string) (string, bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" || len(name) > 253 {
		return name, false
	}
	if _, ok := dns.IsDomainName(name); !ok || strings.Contains(name, "..") {
		return name, false
	}
	return name, true
}

// LookupMail finds the mail hosts of domain, an ASCII (A-label) domain
// without trailing dot. It never returns OutcomeNXDomain, OutcomeNullMX or
// OutcomeNoRecords unless a server said so; any failure is OutcomeError.
// When ctx ends first it returns an error outcome with Err "timeout" at
// once; the lookup itself goes on, bounded, to fill the cache.
func (r *Resolver) LookupMail(ctx context.Context, domain string) MailResult {
	name, ok := normalize(domain)
	if !ok {
		return MailResult{Domain: name, Outcome: OutcomeError, Err: errInvalid}
	}
	if res, ok := r.mail.Get(name, r.now()); ok {
		return res.clone()
	}
	if ctx.Err() != nil {
		return MailResult{Domain: name, Outcome: OutcomeError, Err: errTimeout}
	}
	ch := r.flights.DoChan("mx:"+name, func() (any, error) {
		// Detached from the first caller so its deadline does not become
		// every joiner's; r.budget still bounds it.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.budget)
		defer cancel()
		res, ttl := r.resolveMail(fctx, name)
		r.mail.Put(name, res, r.now(), ttl)
		return res, nil
	})
	select {
	case <-ctx.Done():
		return MailResult{Domain: name, Outcome: OutcomeError, Err: errTimeout}
	case v := <-ch:
		return v.Val.(MailResult).clone()
	}
}

// resolveMail does the queries behind LookupMail and says how long the
// result may be cached (0: not at all).
func (r *Resolver) resolveMail(ctx context.Context, name string) (MailResult, time.Duration) {
	res := MailResult{Domain: name}
	resp, f := r.query(ctx, name, dns.TypeMX)
	if f != nil {
		res.Outcome, res.Rcode, res.Err = OutcomeError, f.rcode, f.kind
		return res, 0
	}
	res.Rcode = rcodeString(resp.Rcode)
	if resp.Rcode == dns.RcodeNameError {
		res.Outcome = OutcomeNXDomain
		return res, negativeTTL(resp)
	}

	res, ttl, done := mxAnswer(resp, name)
	if done {
		return res, ttl
	}

	// No MX at all: RFC 5321 section 5.1 falls back to the domain's own
	// addresses.
	negTTL := negativeTTL(resp)
	ar, f := r.lookupAddrs(ctx, name)
	switch {
	case len(ar.addrs) > 0:
		res.Outcome, res.Implicit = OutcomeOK, true
		res.MX = []MX{{Host: name, Pref: 0}}
		return res, min(ttl, negTTL, ar.ttl)
	case f != nil:
		res.Outcome, res.Rcode, res.Err = OutcomeError, f.rcode, f.kind
		return res, 0
	default:
		res.Outcome = OutcomeNoRecords
		return res, min(negTTL, ar.ttl)
	}
}

// mxAnswer reads a NOERROR answer to an MX query for name. done is false
// when the answer holds no MX at all, so that the caller falls back to
// address records; ttl is then the smallest TTL of the CNAME chain.
func mxAnswer(resp *dns.Msg, name string) (res MailResult, ttl time.Duration, done bool) {
	res = MailResult{Domain: name, Rcode: rcodeString(resp.Rcode)}
	rrs, ttl := chase(resp, name, dns.TypeMX)
	null := false
	for _, rr := range rrs {
		mx := rr.(*dns.MX)
		host := strings.ToLower(strings.TrimSuffix(mx.Mx, "."))
		if host == "" {
			null = true
			continue
		}
		if i := slices.IndexFunc(res.MX, func(m MX) bool { return m.Host == host }); i >= 0 {
			res.MX[i].Pref = min(res.MX[i].Pref, mx.Preference)
			continue
		}
		res.MX = append(res.MX, MX{Host: host, Pref: mx.Preference})
	}
	if len(res.MX) > 0 {
		// A "." among real hosts is a misconfiguration; the real hosts
		// still take mail.
		slices.SortFunc(res.MX, func(a, b MX) int { return cmp.Or(cmp.Compare(a.Pref, b.Pref), strings.Compare(a.Host, b.Host)) })
		res.Outcome = OutcomeOK
		return res, ttl, true
	}
	if null {
		// The null MX record is published data with its own TTL, not an
		// absence, so its TTL says how long the statement holds.
		res.Outcome = OutcomeNullMX
		return res, ttl, true
	}

	return res, ttl, false
}

// addrResult is the merged answer of an A and an AAAA query.
type addrResult struct {
	addrs []netip.Addr // IPv4 first: many runtimes have no IPv6 route
	ttl   time.Duration
	nx    bool
}

// lookupAddrs queries A and AAAA for name in parallel. Addresses from one
// family count even if the other query failed; without addresses, any
// failure is returned so that "no address" is only claimed when both
// queries were answered.
func (r *Resolver) lookupAddrs(ctx context.Context, name string) (addrResult, *failure) {
	type one struct {
		qtype uint16
		resp  *dns.Msg
		f     *failure
	}
	aaaa := make(chan one, 1)
	go func() {
		resp, f := r.query(ctx, name, dns.TypeAAAA)
		aaaa <- one{dns.TypeAAAA, resp, f}
	}()
	aResp, aFail := r.query(ctx, name, dns.TypeA)
	six := <-aaaa

	out := addrResult{ttl: maxCacheTTL}
	var fail *failure
	negTTL := maxCacheTTL
	for _, q := range []one{{dns.TypeA, aResp, aFail}, six} {
		if q.f != nil {
			fail = q.f
			continue
		}
		if q.resp.Rcode == dns.RcodeNameError {
			out.nx = true
			negTTL = min(negTTL, negativeTTL(q.resp))
			continue
		}
		rrs, ttl := chase(q.resp, name, q.qtype)
		if len(rrs) == 0 {
			negTTL = min(negTTL, negativeTTL(q.resp))
			continue
		}
		for _, rr := range rrs {
			var ip net.IP
			switch v := rr.(type) {
			case *dns.A:
				ip = v.A
			case *dns.AAAA:
				ip = v.AAAA
			}
			if a, ok := netip.AddrFromSlice(ip); ok {
				out.addrs = append(out.addrs, a.Unmap())
			}
		}
		out.ttl = min(out.ttl, ttl)
	}
	if len(out.addrs) > 0 {
		return out, nil
	}
	if fail != nil {
		return out, fail
	}
	out.ttl = negTTL
	return out, nil
}

// Errors of LookupHost, for errors.Is.
var (
	// ErrNoAddress: DNS says the host has no address (NXDOMAIN, or no
	// A/AAAA records). It is an answer, not a failure.
	ErrNoAddress = errors.New("dnscheck: host has no address")
	// ErrLookupFailed: the lookup did not get an answer (SERVFAIL, REFUSED,
	// timeout, network); trying later may succeed.
	ErrLookupFailed = errors.New("dnscheck: lookup failed")
	// ErrBadName: the host name is not a valid DNS name.
	ErrBadName = errors.New("dnscheck: invalid host name")
)

// LookupHost returns the IPv4 then IPv6 addresses of host. It fails with
// ErrNoAddress when DNS says the host has no address, ErrLookupFailed when
// the lookup failed, ErrBadName for a name that is not one.
func (r *Resolver) LookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	name, ok := normalize(host)
	if !ok {
		return nil, ErrBadName
	}
	if hr, ok := r.hosts.Get(name, r.now()); ok {
		return hr.result(name)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrLookupFailed, name, ctx.Err())
	}
	ch := r.flights.DoChan("host:"+name, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.budget)
		defer cancel()
		ar, f := r.lookupAddrs(fctx, name)
		if f != nil {
			return nil, fmt.Errorf("%w: %s: %s", ErrLookupFailed, name, f.kind)
		}
		hr := hostResult{addrs: ar.addrs, nx: ar.nx && len(ar.addrs) == 0}
		r.hosts.Put(name, hr, r.now(), ar.ttl)
		return hr, nil
	})
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s: %w", ErrLookupFailed, name, ctx.Err())
	case v := <-ch:
		if v.Err != nil {
			return nil, v.Err
		}
		return v.Val.(hostResult).result(name)
	}
}

func (h hostResult) result(name string) ([]netip.Addr, error) {
	if len(h.addrs) == 0 {
		if h.nx {
			return nil, fmt.Errorf("%w: %s does not exist", ErrNoAddress, name)
		}
		return nil, fmt.Errorf("%w: %s has no A or AAAA record", ErrNoAddress, name)
	}
	return slices.Clone(h.addrs), nil
}

// chase collects the records of qtype that answer name, following the
// CNAME chain the server returned, and the smallest TTL along the way,
// clamped to the cache bounds.
func chase(resp *dns.Msg, name string, qtype uint16) ([]dns.RR, time.Duration) {
	owners := []string{dns.Fqdn(name)}
	minTTL := uint32(maxCacheTTL / time.Second)
	for hop := 0; hop < 16; hop++ {
		cur := owners[len(owners)-1]
		i := slices.IndexFunc(resp.Answer, func(rr dns.RR) bool {
			return rr.Header().Rrtype == dns.TypeCNAME && strings.EqualFold(rr.Header().Name, cur)
		})
		if i < 0 {
			break
		}
		c := resp.Answer[i].(*dns.CNAME)
		if slices.ContainsFunc(owners, func(o string) bool { return strings.EqualFold(o, c.Target) }) {
			break // a loop
		}
		minTTL = min(minTTL, c.Hdr.Ttl)
		owners = append(owners, c.Target)
	}
	var out []dns.RR
	for _, rr := range resp.Answer {
		h := rr.Header()
		if h.Rrtype != qtype || h.Class != dns.ClassINET {
			continue
		}
		if slices.ContainsFunc(owners, func(o string) bool { return strings.EqualFold(o, h.Name) }) {
			out = append(out, rr)
			minTTL = min(minTTL, h.Ttl)
		}
	}
	return out, clampTTL(time.Duration(minTTL) * time.Second)
}

// negativeTTL is how long a negative answer may be cached: the smaller of
// the SOA's TTL and MINIMUM field (RFC 2308 section 5), or defaultNegTTL
// when the server sent no SOA.
func negativeTTL(resp *dns.Msg) time.Duration {
	for _, rr := range resp.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return clampTTL(time.Duration(min(soa.Hdr.Ttl, soa.Minttl)) * time.Second)
		}
	}
	return defaultNegTTL
}

func clampTTL(d time.Duration) time.Duration {
	return min(max(d, minCacheTTL), maxCacheTTL)
}
