package webhook

import (
	"net/netip"
	"net/url"
	"strings"

	"github.com/evs-dev/evs/internal/egress"
	"github.com/evs-dev/evs/internal/evs"
)

// MaxURLLength bounds a callbackUrl.
const MaxURLLength = 2048

// CheckURL validates a callbackUrl at batch creation: https, or http to a
// host inside the egress allow-list (an IP literal or localhost, since a
// name's addresses are only known when dialling); no userinfo; at most
// 2,048 characters. An IP literal the egress policy refuses is refused here
// already. Errors are invalid_request.
func CheckURL(raw string, pol *egress.Policy) error {
	bad := func(why string) error {
		return evs.Errorf(evs.CodeInvalidRequest, "The callbackUrl %s.", why)
	}
	if len(raw) > MaxURLLength {
		return bad("is longer than 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Opaque != "" {
		return bad("is not an absolute URL")
	}
	if u.User != nil {
		return bad("must not carry a user name or password")
	}
	host := u.Hostname()
	if host == "" {
		return bad("has no host")
	}
	addr, literal := hostAddr(host)
	switch strings.ToLower(u.Scheme) {
	case "https":
		if literal && !pol.Allowed(addr) {
			return bad("names an address the service may not connect to")
		}
		return nil
	case "http":
		if literal && inAllowlist(pol, addr) {
			return nil
		}
		return bad("must use https (http only to a host inside EVS_EGRESS_ALLOW)")
	default:
		return bad("must use https")
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

// inAllowlist tells whether a is inside one of EVS_EGRESS_ALLOW's ranges.
func inAllowlist(pol *egress.Policy, a netip.Addr) bool {
	for _, p := range pol.Allowlist() {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
