package server_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/server"
)

// TestTrustedProxy: behind a proxy on 127.0.0.2 (EVS_TRUSTED_PROXIES
// 127.0.0.2/32), failed authentications are counted per client that the
// proxy forwarded for, not per proxy: one client's bad keys get 429 while
// another client's valid key through the same proxy gets 200. A peer that
// is not trusted cannot dodge the limiter by writing X-Forwarded-For
// itself. The log line of each call names the client.
func TestTrustedProxy(t *testing.T) {
	h := start(t, options{server: func(o *server.Options) {
		o.Config.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	}})
	proxy, direct := clientFrom("127.0.0.2"), clientFrom("127.0.0.4")
	bad := "evs." + strings.Repeat("A", 43)
	verify := func(xff, key string) reply {
		t.Helper()
		c := proxy
		if xff == "" {
			c = direct
		}
		return h.doFrom(c, req{method: "POST", path: "/v1/verify", key: key, headers: map[string]string{"X-Forwarded-For": xff},
			body: `{"email":"alice@x.example","mode":"quick"}`})
	}
	// The attacker's own header says it is someone else; the proxy
	// appended the address it really came from.
	attacker := "203.0.113.66, 198.51.100.1"
	for i := 0; i < 20; i++ {
		if r := verify(attacker, bad); r.status != 401 {
			t.Fatalf("failure %d: %d %s", i+1, r.status, r.body)
		}
	}
	if r := verify(attacker, bad); r.status != 429 || r.errorCode(t) != "rate_limited" {
		t.Fatalf("21st failure of 198.51.100.1: %d %s", r.status, r.body)
	}
	if r := verify("198.51.100.1", h.liveKey); r.status != 429 {
		t.Fatalf("an unused good key from the throttled client: %d, want 429", r.status)
	}
	neighbour := verify("198.51.100.2", h.testKey)
	if neighbour.status != 200 {
		t.Fatalf("another client through the same proxy: %d %s, want 200", neighbour.status, neighbour.body)
	}
	if r := verify("203.0.113.66", bad); r.status != 401 {
		t.Fatalf("the address the attacker wrote is not throttled: %d, want 401", r.status)
	}

	// Not a trusted peer: X-Forwarded-For is the client's own text, and
	// a fresh one each time changes nothing.
	var spoofed reply
	for i := 0; i < 21; i++ {
		spoofed = h.doFrom(direct, req{method: "POST", path: "/v1/verify", key: bad,
			headers: map[string]string{"X-Forwarded-For": "198.51.100." + string(rune('a'+i))},
			body:    `{"email":"alice@x.example","mode":"quick"}`})
	}
	if spoofed.status != 429 {
		t.Fatalf("21st failure from an untrusted peer with varying X-Forwarded-For: %d, want 429", spoofed.status)
	}

	lines := requestLines(t, h.logs.String())
	for _, c := range []struct {
		r    reply
		want string
	}{{neighbour, "198.51.100.2"}, {spoofed, "127.0.0.4"}} {
		l := lines[c.r.header.Get("X-Request-Id")]
		if len(l) != 1 || l[0]["client"] != c.want {
			t.Errorf("log line %v, want client %s", l, c.want)
		}
	}
}
