package server_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestLogs: one structured line per call with the request id, route,
// status, latency and account — and never an address or an API key, not
// even in failures or in the batch worker's lines.
func TestLogs(t *testing.T) {
	h := start(t, options{})
	secretAddrs := []string{"alice@good.example", "nobody@good.example", "team+rejected-email@x.example", "carol@missing.example"}
	var ids []string
	for _, a := range secretAddrs[:2] {
		r := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"` + a + `"}`})
		ids = append(ids, r.header.Get("X-Request-Id"))
	}
	r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"` + secretAddrs[2] + `"}`})
	ids = append(ids, r.header.Get("X-Request-Id"))
	// A bad request that quotes nothing back, an unknown key, a batch.
	h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"` + secretAddrs[3] + `","x":1}`})
	h.do(req{method: "POST", path: "/v1/verify", key: "evs." + strings.Repeat("Q", 43), body: `{"email":"a@b.example"}`})
	b := h.do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":["` + secretAddrs[0] + `","` + secretAddrs[3] + `"]}`})
	id := decodeEnvelope(t, b).Request.ID
	h.poll(h.liveKey, id, 10*time.Second)
	h.stop()

	logs := h.logs.String()
	for _, secret := range append(secretAddrs, h.liveKey, h.testKey) {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
	calls, access := map[string]map[string]any{}, map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		switch m["msg"] {
		case "call":
			calls[m["requestId"].(string)] = m
		case "access":
			access[m["requestId"].(string)] = m
		}
	}
	for i, rid := range ids {
		m, ok := calls[rid]
		if !ok {
			t.Fatalf("no call line for request %d (%s)\n%s", i, rid, logs)
		}
		for _, f := range []string{"route", "status", "latencyMs", "accountId"} {
			if _, ok := m[f]; !ok {
				t.Errorf("call line %v lacks %s", m, f)
			}
		}
		if m["route"] != "POST /v1/verify" || m["status"] != float64(200) {
			t.Errorf("call line %v: want route POST /v1/verify, status 200", m)
		}
		if a := access[rid]; a == nil || a["accountId"] != m["accountId"] {
			t.Errorf("gateway access line %v does not name the account of call line %v", a, m)
		}
	}
	if c := calls[b.header.Get("X-Request-Id")]; c == nil || c["batchId"] != id {
		t.Errorf("batch create call line %v does not name batch %s", c, id)
	}
}
