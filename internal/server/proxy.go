package server

import (
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
			a := api.ParseHost(strings.TrimSpace(entries[j]))
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

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	return slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(a) })
}
