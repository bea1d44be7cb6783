package server_test

import (
	"strings"
	"testing"
)

// TestVerifyLogDomain: the one line of a POST /v1/verify names the
// address's domain (never the address), taken from the decision, also when
// an idempotent replay made no decision and for test-mode keys; an invalid
// address has no domain to name.
func TestVerifyLogDomain(t *testing.T) {
	h := start(t, options{})
	replay := map[string]string{"Idempotency-Key": "log-domain-1"}
	cases := []struct {
		name, key, email string
		headers          map[string]string
		want             string
	}{
		{"live", h.liveKey, "alice@Good.Example", nil, "good.example"},
		{"test mode", h.testKey, "team+rejected-email@x.example", nil, "x.example"},
		{"first of an idempotent pair", h.liveKey, "alice@good.example", replay, "good.example"},
		{"replayed", h.liveKey, "alice@good.example", replay, "good.example"},
		{"invalid syntax", h.liveKey, "alice..smith@good.example", nil, ""},
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		r := h.do(req{method: "POST", path: "/v1/verify", key: c.key, body: `{"email":"` + c.email + `"}`, headers: c.headers})
		if r.status != 200 {
			t.Fatalf("%s: status %d: %s", c.name, r.status, r.body)
		}
		ids[i] = r.header.Get("X-Request-Id")
	}
	h.stop()
	logs := h.logs.String()
	for _, c := range cases {
		if strings.Contains(logs, strings.ToLower(c.email)) || strings.Contains(logs, c.email) {
			t.Errorf("logs contain %q", c.email)
		}
	}
	lines := requestLines(t, logs)
	for i, c := range cases {
		if len(lines[ids[i]]) != 1 {
			t.Fatalf("%s: %d log lines for request %s, want 1", c.name, len(lines[ids[i]]), ids[i])
		}
		if got, _ := lines[ids[i]][0]["domain"].(string); got != c.want {
			t.Errorf("%s: call line domain %q, want %q", c.name, got, c.want)
		}
	}
}
