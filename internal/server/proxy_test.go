package server

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/evs-dev/evs/internal/api"
)

// TestClientAddr: X-Forwarded-For is believed only from a trusted peer,
// walked from the right past trusted proxies; what a client wrote itself
// (entries left of the first untrusted one) never counts.
func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	cases := []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"untrusted peer, XFF ignored", "192.0.2.9:4000", []string{"198.51.100.1"}, "192.0.2.9"},
		{"trusted peer, no XFF", "127.0.0.2:4000", nil, "127.0.0.2"},
		{"trusted peer, one hop", "127.0.0.2:4000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"spoofed entries left of the real client", "127.0.0.2:4000", []string{"203.0.113.66, 198.51.100.1"}, "198.51.100.1"},
		{"a chain of trusted proxies", "127.0.0.2:4000", []string{"198.51.100.1, 10.1.1.1,10.2.2.2"}, "198.51.100.1"},
		{"entries in several header lines", "127.0.0.2:4000", []string{"203.0.113.66", "198.51.100.1", "10.2.2.2"}, "198.51.100.1"},
		{"every hop trusted", "127.0.0.2:4000", []string{"10.1.1.1, 10.2.2.2"}, "10.1.1.1"},
		{"garbage stops at the last proxy", "127.0.0.2:4000", []string{"198.51.100.1, unknown, 10.2.2.2"}, "10.2.2.2"},
		{"garbage right away", "127.0.0.2:4000", []string{"not-an-ip"}, "127.0.0.2"},
		{"ports and brackets", "127.0.0.2:4000", []string{"[2001:db8::7]:443"}, "2001:db8::7"},
		{"IPv4-mapped entry", "127.0.0.2:4000", []string{"::ffff:198.51.100.1"}, "198.51.100.1"},
		{"IPv6 trusted peer", "[fd00::1]:4000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"IPv4-mapped trusted peer", "[::ffff:127.0.0.2]:4000", []string{"198.51.100.1"}, "198.51.100.1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: c.peer, Header: http.Header{}}
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := clientAddr(r, trusted).String(); got != c.want {
				t.Fatalf("client %s, want %s", got, c.want)
			}
			if got := clientAddr(r, nil).String(); got != api.ParseHost(c.peer).String() {
				t.Fatalf("with no trusted proxies: %s, want the peer", got)
			}
		})
	}
}
