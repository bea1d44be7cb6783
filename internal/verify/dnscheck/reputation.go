package dnscheck

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// What receiving servers check of us before they answer about a mailbox:
// our egress address on a DNS blocklist, our HELO name and that address
// confirming each other (forward-confirmed reverse DNS). These checks ask
// the servers directly, past the cache, so a listing is seen at once.

// Listing is what one DNS blocklist (RFC 5782) says of an address.
type Listing struct {
	// Zone is the list's zone ("zen.spamhaus.org").
	Zone string `json:"zone"`
	// Listed is true when the list returns an address for ours.
	Listed bool `json:"listed"`
	// Codes are the list's return codes (127.0.0.x), when listed.
	Codes []string `json:"codes,omitempty"`
	// Error says why the list gave no answer (a failed lookup, or a
	// return code in 127.255.255.0/24, by which Spamhaus refuses queries
	// from public resolvers); Listed is then false and says nothing.
	Error string `json:"error,omitempty"`
}

// Blocklisted asks the blocklist zone whether ip is listed.
func (r *Resolver) Blocklisted(ctx context.Context, ip netip.Addr, zone string) Listing {
	l := Listing{Zone: zone}
	name := reverseName(ip) + strings.TrimSuffix(zone, ".") + "."
	resp, f := r.query(ctx, name, dns.TypeA)
	if f != nil {
		l.Error = "lookup failed: " + f.kind
		return l
	}
	if resp.Rcode == dns.RcodeNameError {
		return l
	}
	rrs, _ := chase(resp, name, dns.TypeA)
	for _, rr := range rrs {
		a, ok := rr.(*dns.A)
		if !ok {
			continue
		}
		switch {
		case a.A[0] == 127 && a.A[1] == 255 && a.A[2] == 255:
			l.Error = "the list refused the query (" + a.A.String() + "): use a resolver it serves"
			return l
		case a.A[0] == 127:
			l.Codes = append(l.Codes, a.A.String())
		}
	}
	slices.Sort(l.Codes)
	l.Listed = len(l.Codes) > 0
	return l
}

// reverseName is ip's label sequence under a blocklist zone, with a
// trailing dot: 192.0.2.1 → "1.2.0.192.", an IPv6 address by nibbles.
func reverseName(ip netip.Addr) string {
	rev, _ := dns.ReverseAddr(ip.Unmap().WithZone("").String())
	return strings.TrimSuffix(strings.TrimSuffix(rev, "in-addr.arpa."), "ip6.arpa.")
}

// HELOCheck is what DNS says of our HELO name and egress address.
type HELOCheck struct {
	// Name is the HELO name checked.
	Name string `json:"name"`
	// OK is true when the name resolves and, where the egress address is
	// known, the name resolves to it and the address's PTR names it.
	OK bool `json:"ok"`
	// Detail says what failed, or what was confirmed.
	Detail string `json:"detail"`
}

// ConfirmHELO checks name, our HELO name, against ip, our egress address
// (the zero Addr when not known: then only that the name resolves).
// Receivers commonly refuse a client whose HELO name does not resolve
// (Postfix's reject_unknown_helo_hostname), or whose address has no PTR
// confirming a name (reject_unknown_client_hostname).
func (r *Resolver) ConfirmHELO(ctx context.Context, name string, ip netip.Addr) HELOCheck {
	c := HELOCheck{Name: name}
	addrs, err := r.LookupHost(ctx, name)
	if err != nil {
		c.Detail = "the HELO name does not resolve: " + err.Error()
		return c
	}
	if !ip.IsValid() {
		c.OK, c.Detail = true, "the HELO name resolves; the egress address is not known, so its reverse DNS is not checked"
		return c
	}
	ip = ip.Unmap()
	if !slices.Contains(addrs, ip) {
		c.Detail = fmt.Sprintf("the HELO name does not resolve to the egress address %s", ip)
		return c
	}
	ptr, err := r.lookupPTR(ctx, ip)
	if err != nil {
		c.Detail = fmt.Sprintf("the reverse DNS of %s: %v", ip, err)
		return c
	}
	want, _ := normalize(name)
	if !slices.Contains(ptr, want) {
		c.Detail = fmt.Sprintf("the PTR of %s names %s, not the HELO name", ip, strings.Join(ptr, ", "))
		return c
	}
	c.OK, c.Detail = true, "forward-confirmed reverse DNS: the HELO name and the egress address name each other"
	return c
}

// lookupPTR returns the names ip's PTR records give, lower case without
// the trailing dot.
func (r *Resolver) lookupPTR(ctx context.Context, ip netip.Addr) ([]string, error) {
	name, err := dns.ReverseAddr(ip.String())
	if err != nil {
		return nil, err
	}
	resp, f := r.query(ctx, name, dns.TypePTR)
	if f != nil {
		return nil, fmt.Errorf("%w: %s", ErrLookupFailed, f.kind)
	}
	rrs, _ := chase(resp, name, dns.TypePTR)
	var out []string
	for _, rr := range rrs {
		if p, ok := rr.(*dns.PTR); ok {
			out = append(out, strings.ToLower(strings.TrimSuffix(p.Ptr, ".")))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no PTR record", ErrNoAddress)
	}
	return out, nil
}
