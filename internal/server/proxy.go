package server

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/evs-dev/evs/internal/api"
)

// clientAddr is the address of the client a call comes from: the TCP peer,
// or behind trusted proxies the right-most X-Forwarded-For entry that is
// not itself trusted (only what trusted proxies appended can be believed).
// An entry that is not an address stops the walk at the last proxy.
func clientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer := api.PeerAddr(r)
	if !peer.IsValid() || !isTrusted(peer, trusted) {
		return peer
	}
	client := peer
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		entries := strings.Split(hops[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			a := parseHost(strings.TrimSpace(entries[j]))
			if !a.IsValid() {
				return client
			}
			client = a
			if !isTrusted(a, trusted) {
				return client
			}
		}
	}
	return client // every hop a trusted proxy: the left-most one
}

// parseHost reads an address with or without a port ("192.0.2.7",
// "192.0.2.7:5555", "[2001:db8::1]:443", "2001:db8::1"), IPv4-mapped
// forms as IPv4; the zero Addr when it is none.
func parseHost(s string) netip.Addr {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("")
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	return slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(a) })
}
