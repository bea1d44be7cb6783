package server_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestLogs: exactly one structured line per call — also for the calls no
// handler sees (no route, no key, an unknown key) — with the request id,
// method, route, status, latency and account, and never an address or an
// API key, not even in failures or in the batch worker's lines.
func TestLogs(t *testing.T) {
	h := start(t, options{})
	secretAddrs := []string{"alice@good.example", "nobody@good.example", "team+rejected-email@x.example", "carol@missing.example"}
	unknownKey := "evs." + strings.Repeat("Q", 43)
	type call struct {
		r                   reply
		method, route, acct string
		status              int
	}
	var calls []call
	do := func(r req, route, acct string, status int) reply {
		rep := h.do(r)
		calls = append(calls, call{rep, r.method, route, acct, status})
		return rep
	}
	for _, a := range secretAddrs[:2] {
		do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"` + a + `"}`}, "/v1/verify", h.liveAcct, 200)
	}
	do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"` + secretAddrs[2] + `"}`}, "/v1/verify", h.testAcct, 200)
	// A bad request that quotes nothing back, an unknown key, no key, no
	// route, a batch.
	do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"` + secretAddrs[3] + `","x":1}`}, "/v1/verify", h.liveAcct, 400)
	do(req{method: "POST", path: "/v1/verify", key: unknownKey, body: `{"email":"a@b.example"}`}, "/v1/verify", "", 401)
	do(req{method: "POST", path: "/v1/verify", body: `{"email":"a@b.example"}`}, "/v1/verify", "", 401)
	do(req{method: "GET", path: "/v1/nowhere", key: h.liveKey}, "", "", 404)
	b := do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":["` + secretAddrs[0] + `","` + secretAddrs[3] + `"]}`}, "/v1/requests", h.liveAcct, 201)
	id := decodeEnvelope(t, b).Request.ID
	h.poll(h.liveKey, id, 10*time.Second)
	h.stop()

	logs := h.logs.String()
	for _, secret := range append(secretAddrs, h.liveKey, h.testKey, unknownKey) {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
	lines := requestLines(t, logs)
	for i, c := range calls {
		rid := c.r.header.Get("X-Request-Id")
		if c.r.status != c.status {
			t.Fatalf("call %d: status %d, want %d: %s", i, c.r.status, c.status, c.r.body)
		}
		if len(lines[rid]) != 1 {
			t.Fatalf("call %d (%s) has %d log lines, want 1: %v", i, rid, len(lines[rid]), lines[rid])
		}
		m := lines[rid][0]
		if m["msg"] != "call" || m["method"] != c.method || m["route"] != c.route || m["status"] != float64(c.status) || m["accountId"] != c.acct {
			t.Errorf("call %d: line %v, want %s %q %d account %q", i, m, c.method, c.route, c.status, c.acct)
		}
		if _, ok := m["latencyMs"]; !ok {
			t.Errorf("call %d: line %v lacks latencyMs", i, m)
		}
	}
	if m := lines[b.header.Get("X-Request-Id")][0]; m["batchId"] != id {
		t.Errorf("batch create line %v does not name batch %s", m, id)
	}
}

// requestLines parses logs, which must all be JSON, into the lines of each
// request id.
func requestLines(t *testing.T, logs string) map[string][]map[string]any {
	t.Helper()
	lines := map[string][]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if rid, ok := m["requestId"].(string); ok {
			lines[rid] = append(lines[rid], m)
		}
	}
	return lines
}
