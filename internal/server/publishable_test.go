package server_test

import (
	"context"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
)

// Publishable keys (contract, section 17): POST /v1/verify only, from
// their listed origins only, a trimmed reply, limits of their own.

const shopOrigin = "https://shop.example"

// publishable issues a publishable key of origins for the account name
// (created in test mode if needed), as `evs keys create --publishable`
// does.
func (h *harness) publishable(name string, origins ...string) (acct, key string) {
	h.t.Helper()
	acct, _ = h.account(name, true)
	key, err := authorizer.Issue(context.Background(), h.st, evs.Key{AccountID: acct, Kind: evs.KeyPublishable, Origins: origins}, h.clock.Now())
	if err != nil {
		h.t.Fatalf("issue publishable key: %v", err)
	}
	return acct, key
}

func pkVerify(key, origin string) req {
	r := req{method: http.MethodPost, path: "/v1/verify", key: key, body: `{"email":"someone@gmial.com"}`}
	if origin != "" {
		r.headers = map[string]string{"Origin": origin}
	}
	return r
}

func TestPublishableKeyFromItsOrigin(t *testing.T) {
	h := start(t, options{})
	_, key := h.publishable("shop", shopOrigin, "http://localhost:8080")
	if !strings.HasPrefix(key, "evs_pk.") {
		t.Fatalf("publishable key %q lacks the evs_pk. prefix", key[:7])
	}
	for _, origin := range []string{shopOrigin, "http://localhost:8080"} {
		r := h.do(pkVerify(key, origin))
		if r.status != http.StatusOK {
			t.Fatalf("from %s: %d %s", origin, r.status, r.body)
		}
		m := r.json(t)
		var fields []string
		for k := range m {
			fields = append(fields, k)
		}
		sort.Strings(fields)
		if want := []string{"flags", "reason", "requestId", "score", "status", "suggestion"}; !slices.Equal(fields, want) {
			t.Errorf("reply fields %v, want only %v", fields, want)
		}
		if m["suggestion"] != "someone@gmail.com" {
			t.Errorf("suggestion = %v, want the typo's fix", m["suggestion"])
		}
		if got := r.header.Get("Access-Control-Allow-Origin"); got != origin {
			t.Errorf("Access-Control-Allow-Origin = %q, want %q", got, origin)
		}
		if !slices.Contains(r.header.Values("Vary"), "Origin") {
			t.Errorf("Vary = %v, want Origin", r.header.Values("Vary"))
		}
	}
	// A secret key of the same account still gets the whole reply, and no
	// CORS header.
	_, secret := h.account("shop", true)
	r := h.do(req{method: http.MethodPost, path: "/v1/verify", key: secret, body: `{"email":"someone@gmial.com"}`,
		headers: map[string]string{"Origin": shopOrigin}})
	if r.status != http.StatusOK || r.json(t)["decision"] == nil || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("secret key: %d, ACAO %q, %s", r.status, r.header.Get("Access-Control-Allow-Origin"), r.body)
	}
}

func TestPublishableKeyRefused(t *testing.T) {
	h := start(t, options{})
	_, key := h.publishable("shop", shopOrigin)
	tests := []struct {
		name   string
		origin string
	}{
		{"no origin", ""},
		{"another origin", "https://evil.example"},
		{"a listed origin's other port", "https://shop.example:8443"},
		{"null origin", "null"},
		{"http of a listed https origin", "http://shop.example"},
	}
	for _, tt := range tests {
		r := h.do(pkVerify(key, tt.origin))
		if r.status != http.StatusForbidden || r.errorCode(t) != evs.CodeForbidden {
			t.Errorf("%s: %d %s, want 403 forbidden", tt.name, r.status, r.body)
		}
		if got := r.header.Get("Access-Control-Allow-Origin"); got != "" {
			t.Errorf("%s: refused reply carries Access-Control-Allow-Origin %q", tt.name, got)
		}
	}
}

// TestPublishableKeyOnEveryOtherRoute checks route by route against
// api/openapi.yaml: every operation that takes a key, but POST /v1/verify,
// refuses a publishable key, even from its own origin.
func TestPublishableKeyOnEveryOtherRoute(t *testing.T) {
	h := start(t, options{})
	_, key := h.publishable("shop", shopOrigin)
	checked := 0
	for path, item := range h.contract.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.Security != nil && len(*op.Security) == 0 {
				continue // takes no key (health, preflight, upload and export URLs)
			}
			if method == http.MethodPost && path == "/v1/verify" {
				continue
			}
			p := strings.ReplaceAll(path, "{id}", "00000000-0000-0000-0000-000000000000")
			body := ""
			if method == http.MethodPost {
				body = `{}`
			}
			r := h.do(req{method: method, path: p, key: key, body: body, headers: map[string]string{"Origin": shopOrigin}})
			if r.status != http.StatusForbidden || r.errorCode(t) != evs.CodeForbidden {
				t.Errorf("%s %s with a publishable key: %d %s, want 403 forbidden", method, path, r.status, r.body)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d operations; the contract has more", checked)
	}
}

func TestPublishablePreflight(t *testing.T) {
	h := start(t, options{})
	r := h.do(req{method: http.MethodOptions, path: "/v1/verify", headers: map[string]string{
		"Origin": "https://any.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type, x-api-key"}})
	if r.status != http.StatusNoContent {
		t.Fatalf("preflight: %d %s", r.status, r.body)
	}
	want := map[string]string{
		"Access-Control-Allow-Origin":  "https://any.example",
		"Access-Control-Allow-Methods": "POST",
		"Access-Control-Allow-Headers": "Content-Type, X-Api-Key",
		"Access-Control-Max-Age":       strconv.Itoa(api.PreflightMaxAge),
		"Vary":                         "Origin",
	}
	for k, v := range want {
		if got := r.header.Get(k); got != v {
			t.Errorf("preflight %s = %q, want %q", k, got, v)
		}
	}
}

func TestPublishableKeyRevoked(t *testing.T) {
	h := start(t, options{})
	_, key := h.publishable("shop", shopOrigin)
	if r := h.do(pkVerify(key, shopOrigin)); r.status != http.StatusOK {
		t.Fatalf("before revocation: %d %s", r.status, r.body)
	}
	if _, err := h.st.RevokeKey(context.Background(), authorizer.HashKey(key), h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if r := h.do(pkVerify(key, shopOrigin)); r.status != http.StatusForbidden || r.errorCode(t) != evs.CodeForbidden {
		t.Fatalf("revoked: %d %s, want 403 forbidden", r.status, r.body)
	}
}

// TestPublishablePerAddressLimit: one client address over its limit gets
// 429; another address, another shop's key and the account's secret key
// from the same one still get through.
func TestPublishablePerAddressLimit(t *testing.T) {
	h := start(t, options{})
	_, key := h.publishable("shop", shopOrigin)
	_, secret := h.account("shop", true)
	one, other := clientFrom("127.0.0.1"), clientFrom("127.0.0.3")
	for i := range api.PublishablePerAddress {
		if r := h.doFrom(one, pkVerify(key, shopOrigin)); r.status != http.StatusOK {
			t.Fatalf("call %d: %d %s", i+1, r.status, r.body)
		}
	}
	r := h.doFrom(one, pkVerify(key, shopOrigin))
	if r.status != http.StatusTooManyRequests || r.errorCode(t) != evs.CodeRateLimited || r.header.Get("Retry-After") == "" {
		t.Fatalf("call %d from one address: %d %s, want 429 with Retry-After", api.PublishablePerAddress+1, r.status, r.body)
	}
	if r := h.doFrom(other, pkVerify(key, shopOrigin)); r.status != http.StatusOK {
		t.Fatalf("another address: %d %s", r.status, r.body)
	}
	// Another shop's form, from the same address (a shared NAT), is
	// counted apart.
	_, otherShop := h.publishable("othershop", shopOrigin)
	if r := h.doFrom(one, pkVerify(otherShop, shopOrigin)); r.status != http.StatusOK {
		t.Fatalf("another publishable key from the limited address: %d %s", r.status, r.body)
	}
	sr := h.doFrom(one, req{method: http.MethodPost, path: "/v1/verify", key: secret, body: `{"email":"a@example.com"}`})
	if sr.status != http.StatusOK {
		t.Fatalf("the account's secret key from the limited address: %d %s", sr.status, sr.body)
	}
	// The limit refills: a minute later the address may call again.
	h.clock.Advance(time.Minute)
	if r := h.doFrom(one, pkVerify(key, shopOrigin)); r.status != http.StatusOK {
		t.Fatalf("a minute later: %d %s", r.status, r.body)
	}
}

// TestPublishableLimitBehindProxy: behind a trusted proxy the per-address
// limit counts the forwarded client, not the proxy: one client over its
// limit gets 429 while another through the same proxy gets 200; a peer
// that is not trusted cannot dodge its limit by writing X-Forwarded-For.
func TestPublishableLimitBehindProxy(t *testing.T) {
	h := start(t, options{server: func(o *server.Options) {
		o.Config.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	}})
	_, key := h.publishable("shop", shopOrigin)
	proxy, direct := clientFrom("127.0.0.2"), clientFrom("127.0.0.4")
	via := func(c *http.Client, xff string) reply {
		t.Helper()
		r := pkVerify(key, shopOrigin)
		r.headers["X-Forwarded-For"] = xff
		return h.doFrom(c, r)
	}
	for i := range api.PublishablePerAddress {
		if r := via(proxy, "198.51.100.1"); r.status != http.StatusOK {
			t.Fatalf("call %d of 198.51.100.1: %d %s", i+1, r.status, r.body)
		}
	}
	if r := via(proxy, "198.51.100.1"); r.status != http.StatusTooManyRequests {
		t.Fatalf("198.51.100.1 over its limit: %d %s, want 429", r.status, r.body)
	}
	if r := via(proxy, "198.51.100.2"); r.status != http.StatusOK {
		t.Fatalf("another client through the same proxy: %d %s, want 200", r.status, r.body)
	}
	var last reply
	for i := range api.PublishablePerAddress + 1 {
		last = via(direct, "198.51.100."+strconv.Itoa(10+i))
	}
	if last.status != http.StatusTooManyRequests {
		t.Fatalf("an untrusted peer writing a new X-Forwarded-For each time: %d, want 429", last.status)
	}
}

// TestPublishableQuotaShare: a publishable key's verify is charged to its
// keys' share of the account's address quota (EVS_QUOTA_PUBLISHABLE_PERCENT,
// rounded up) as well as to the quota: once the share is spent the page's
// key is refused, and the account's secret key still gets the rest.
func TestPublishableQuotaShare(t *testing.T) {
	h := start(t, options{server: func(o *server.Options) {
		o.Config.QuotaAddresses, o.Config.QuotaPeriod, o.Config.QuotaPublishablePercent = 4, "month", 25
	}})
	_, key := h.publishable("shop", shopOrigin)
	_, secret := h.account("shop", true)
	if r := h.do(pkVerify(key, shopOrigin)); r.status != http.StatusOK {
		t.Fatalf("the share's one address: %d %s", r.status, r.body)
	}
	if r := h.do(pkVerify(key, shopOrigin)); r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), "publishable keys' share") {
		t.Fatalf("publishable key over its share: %d %s", r.status, r.body)
	}
	for i := range 3 {
		if r := h.do(req{method: http.MethodPost, path: "/v1/verify", key: secret, body: `{"email":"a@example.com"}`}); r.status != http.StatusOK {
			t.Fatalf("secret key's call %d after the page's share was spent: %d %s", i+1, r.status, r.body)
		}
	}
	if r := h.do(req{method: http.MethodPost, path: "/v1/verify", key: secret, body: `{"email":"a@example.com"}`}); r.status != http.StatusTooManyRequests {
		t.Fatalf("the quota's fifth address: %d %s", r.status, r.body)
	}
}
