package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
)

// The egress policy decides which addresses the service may connect to for
// what a tenant's input names (SMTP probes, webhooks): anyone can point an
// MX or a URL at loopback, a private network or the cloud metadata
// service, so only globally reachable unicast addresses are allowed unless
// the operator lists more (EVS_EGRESS_ALLOW).

// ErrEgressRefused is matched by every refusal of the policy:
// errors.Is(err, ErrEgressRefused).
var ErrEgressRefused = errors.New("egress: address is not globally reachable")

// EgressRefusedError says which address was refused and why.
type EgressRefusedError struct {
	// Addr is the refused address, as dialled.
	Addr netip.Addr
	// Range is the special-purpose range that holds it (for an IPv4
	// address in an IPv6 form, the range of the embedded IPv4 address).
	Range netip.Prefix
	// Name says what the range is for, e.g. "private-use".
	Name string
}

// Error implements error.
func (e *EgressRefusedError) Error() string {
	if !e.Range.IsValid() {
		return fmt.Sprintf("egress: refusing %s: %s", e.Addr, e.Name)
	}
	return fmt.Sprintf("egress: refusing %s: %s range %s is not globally reachable", e.Addr, e.Name, e.Range)
}

// Is makes errors.Is(err, ErrEgressRefused) hold.
func (e *EgressRefusedError) Is(target error) bool { return target == ErrEgressRefused }

// EgressPolicy refuses the IANA special-purpose ranges except where the
// allow-list says otherwise; nil has an empty allow-list. It is immutable.
type EgressPolicy struct {
	allow []netip.Prefix
}

// ParseEgress returns the policy whose allow-list is allowCSV (ParseCIDRs).
func ParseEgress(allowCSV string) (*EgressPolicy, error) {
	allow, err := ParseCIDRs(allowCSV)
	if err != nil {
		return nil, fmt.Errorf("egress: allow-list %w", err)
	}
	return &EgressPolicy{allow: allow}, nil
}

// ParseCIDRs reads a comma-separated list of CIDRs (blank: none), each
// kept as its network: "10.1.2.3/8" means 10.0.0.0/8, as route tables read
// it. EVS_EGRESS_ALLOW and EVS_TRUSTED_PROXIES share it.
func ParseCIDRs(csv string) ([]netip.Prefix, error) {
	if strings.TrimSpace(csv) == "" {
		return nil, nil
	}
	var out []netip.Prefix
	for i, s := range strings.Split(csv, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return nil, fmt.Errorf("entry %d is empty; %s", i+1, wantForm)
		}
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("entry %q is not a CIDR; %s", s, wantForm)
		}
		out = append(out, pfx.Masked())
	}
	return out, nil
}

const wantForm = "want comma-separated CIDRs like 127.0.0.0/8,fd00::/8"

// Allowlist returns the allowed CIDRs, in the order given.
func (p *EgressPolicy) Allowlist() []netip.Prefix {
	if p == nil {
		return nil
	}
	return append([]netip.Prefix(nil), p.allow...)
}

// Allowed reports whether a connection to a may be opened.
func (p *EgressPolicy) Allowed(a netip.Addr) bool { return p.Check(a) == nil }

// Check returns nil when a connection to a may be opened, else a
// *EgressRefusedError.
func (p *EgressPolicy) Check(a netip.Addr) error {
	if !a.IsValid() {
		return &EgressRefusedError{Addr: a, Name: "no address"}
	}
	// A zone only selects an interface; the address decides.
	a = a.WithZone("")
	if p.allowed(a) {
		return nil
	}
	if a.Is4() {
		if r, ok := lookup(v4Ranges, a); ok {
			return &EgressRefusedError{Addr: a, Range: r.prefix, Name: r.name}
		}
		return nil
	}
	// An IPv4 address in an IPv6 form reaches that IPv4 address (through
	// the host's stack, a NAT64 gateway or a 6to4 relay), so it is judged
	// as that address, allow-list included.
	if v4, ok := embeddedV4(a); ok {
		if err := p.Check(v4); err != nil {
			re := err.(*EgressRefusedError)
			return &EgressRefusedError{Addr: a, Range: re.Range, Name: re.Name + " (embedded IPv4)"}
		}
		return nil
	}
	if r, ok := lookup(v6Ranges, a); ok {
		return &EgressRefusedError{Addr: a, Range: r.prefix, Name: r.name}
	}
	if !globalUnicast6.Contains(a) {
		// Outside 2000::/3 IANA has allocated nothing that is globally
		// reachable unicast; refusing it all also covers ranges
		// registered after this list was written.
		return &EgressRefusedError{Addr: a, Range: globalUnicast6, Name: "outside IPv6 global unicast"}
	}
	return nil
}

func (p *EgressPolicy) allowed(a netip.Addr) bool {
	// 127.0.0.0/8 must also allow ::ffff:127.0.0.1, the same destination
	// written as IPv6, and the other way round.
	return p != nil && slices.ContainsFunc(p.allow, func(pfx netip.Prefix) bool {
		return pfx.Contains(a) || pfx.Contains(a.Unmap()) || pfx.Contains(netip.AddrFrom16(a.As16()))
	})
}

// MaxURLLength bounds a URL a tenant asks the service to call.
const MaxURLLength = 2048

// CheckURL judges a URL a tenant asks the service to call later (a
// callbackUrl) when it is given: https, or http to an IP literal or
// localhost inside the allow-list; no userinfo; at most MaxURLLength
// bytes; no IP literal the policy refuses. The error's text completes
// "The URL …".
func (p *EgressPolicy) CheckURL(raw string) error {
	if len(raw) > MaxURLLength {
		return fmt.Errorf("is longer than %d characters", MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Opaque != "" {
		return errors.New("is not an absolute URL")
	}
	if u.User != nil {
		return errors.New("must not carry a user name or password")
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("has no host")
	}
	addr, literal := hostAddr(host)
	switch strings.ToLower(u.Scheme) {
	case "https":
		if literal && !p.Allowed(addr) {
			return errors.New("names an address the service may not connect to")
		}
		return nil
	case "http":
		if literal && p.allowed(addr) {
			return nil
		}
		return errors.New("must use https (http only to a host inside EVS_EGRESS_ALLOW)")
	default:
		return errors.New("must use https")
	}
}

// hostAddr returns the address a host names literally: an IP literal, or
// loopback for localhost names.
func hostAddr(host string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), true
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), true
	}
	return netip.Addr{}, false
}

// Control checks the address a net.Dialer is about to connect to, after
// resolution (DNS rebinding included); use it as net.Dialer.Control.
func (p *EgressPolicy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress: cannot check %s address %q: %w", network, address, ErrEgressRefused)
	}
	return p.Check(ap.Addr())
}

// embeddedV4 returns the IPv4 address carried by an IPv4-mapped, NAT64
// well-known-prefix or 6to4 address.
func embeddedV4(a netip.Addr) (netip.Addr, bool) {
	switch {
	case a.Is4In6():
		return a.Unmap(), true
	case nat64WKP.Contains(a):
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

type namedRange struct {
	prefix netip.Prefix
	name   string
}

func lookup(ranges []namedRange, a netip.Addr) (namedRange, bool) {
	i := slices.IndexFunc(ranges, func(r namedRange) bool { return r.prefix.Contains(a) })
	if i < 0 {
		return namedRange{}, false
	}
	return ranges[i], true
}

func ranges(pairs ...string) []namedRange {
	out := make([]namedRange, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, namedRange{netip.MustParsePrefix(pairs[i]), pairs[i+1]})
	}
	return out
}

var (
	nat64WKP       = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour      = netip.MustParsePrefix("2002::/16")
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
)

// v4Ranges are the IANA IPv4 special-purpose ranges (RFC 6890 and its
// updates), plus multicast, reserved and broadcast. A few of them hold
// anycast services that are globally reachable (AS112, 192.0.0.9); none of
// those is a mail server or a webhook receiver, so whole blocks are refused.
var v4Ranges = ranges(
	"0.0.0.0/8", "this network",
	"10.0.0.0/8", "private-use",
	"100.64.0.0/10", "shared address space (CGNAT)",
	"127.0.0.0/8", "loopback",
	"169.254.0.0/16", "link-local (cloud metadata)",
	"172.16.0.0/12", "private-use",
	"192.0.0.0/24", "IETF protocol assignments",
	"192.0.2.0/24", "documentation (TEST-NET-1)",
	"192.31.196.0/24", "AS112-v4",
	"192.52.193.0/24", "AMT",
	"192.88.99.0/24", "deprecated 6to4 relay anycast",
	"192.168.0.0/16", "private-use",
	"192.175.48.0/24", "direct delegation AS112",
	"198.18.0.0/15", "benchmarking",
	"198.51.100.0/24", "documentation (TEST-NET-2)",
	"203.0.113.0/24", "documentation (TEST-NET-3)",
	"224.0.0.0/4", "multicast",
	"240.0.0.0/4", "reserved",
	"255.255.255.255/32", "limited broadcast",
)

// v6Ranges are the IANA IPv6 special-purpose ranges that are not IPv4
// forms (those are judged by their IPv4 address, see embeddedV4). Ranges
// outside 2000::/3 are listed for the name they give in errors; the rest
// of that space is refused as a whole.
var v6Ranges = ranges(
	"::1/128", "loopback",
	"::/128", "unspecified",
	"::/96", "IPv4-compatible (deprecated)",
	"64:ff9b:1::/48", "NAT64 local-use",
	"100::/64", "discard-only",
	"2001:db8::/32", "documentation",
	"2001::/32", "Teredo",
	"2001::/23", "IETF protocol assignments",
	"3fff::/20", "documentation",
	"5f00::/16", "segment routing SIDs",
	"fc00::/7", "unique local",
	"fe80::/10", "link-local",
	"fec0::/10", "site-local (deprecated)",
	"ff00::/8", "multicast",
)
