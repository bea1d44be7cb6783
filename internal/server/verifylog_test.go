package server_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestVerifyLogDomain: the call line of POST /v1/verify names the address's
// domain (never the address), taken from the decision, also when an
// idempotent replay made no decision and for test-mode keys; an invalid
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
	calls := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(h.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if m["msg"] == "call" {
			calls[m["requestId"].(string)] = m
		}
	}
	for i, c := range cases {
		m := calls[ids[i]]
		if m == nil {
			t.Fatalf("%s: no call line for request %s", c.name, ids[i])
		}
		if got, _ := m["domain"].(string); got != c.want {
			t.Errorf("%s: call line domain %q, want %q", c.name, got, c.want)
		}
	}
}
