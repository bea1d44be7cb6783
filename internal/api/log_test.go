package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestCallLine: called as on Lambda, each call has one line — request id,
// method, route template, status, latency, account, and the domain or
// batch, never the address — at ERROR with the cause for a 5xx.
func TestCallLine(t *testing.T) {
	f := newFixture(t)
	verify := f.event("acct-1", http.MethodPost, "/v1/verify", nil, `{"email":"alice@x.example"}`, nil)
	f.fn(context.Background(), verify)
	create := f.event("acct-1", http.MethodPost, "/v1/requests", nil, `{"emails":["bob@y.example"]}`, nil)
	r, _ := f.fn(context.Background(), create)
	batchID := strings.TrimPrefix(r.Headers["Location"], "/v1/requests/")
	orphan := f.event("", http.MethodPost, "/v1/verify", nil, `{"email":"carol@z.example"}`, nil)
	orphan.RequestContext.Authorizer = nil // no principal: a 500 with a cause
	f.fn(context.Background(), orphan)

	lines := map[string][]map[string]any{}
	logs := f.logs.String()
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		rid, _ := m["requestId"].(string)
		lines[rid] = append(lines[rid], m)
	}
	for _, secret := range []string{"alice@", "bob@", "carol@"} {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
	for _, c := range []struct {
		rid, route, acct, level, field, value string
		status                                float64
	}{
		{verify.RequestContext.RequestID, "/v1/verify", "acct-1", "INFO", "domain", "x.example", 200},
		{create.RequestContext.RequestID, "/v1/requests", "acct-1", "INFO", "batchId", batchID, 201},
		{orphan.RequestContext.RequestID, "/v1/verify", "", "ERROR", "error", "api: request without a principal", 500},
	} {
		if len(lines[c.rid]) != 1 {
			t.Fatalf("%s: %d lines, want 1: %s", c.rid, len(lines[c.rid]), logs)
		}
		m := lines[c.rid][0]
		if m["msg"] != "call" || m["method"] != "POST" || m["route"] != c.route || m["status"] != c.status || m["accountId"] != c.acct || m["level"] != c.level || m[c.field] != c.value {
			t.Errorf("%s: line %v, want POST %s %v account %q %s %s=%q", c.rid, m, c.route, c.status, c.acct, c.level, c.field, c.value)
		}
		if _, ok := m["latencyMs"]; !ok {
			t.Errorf("%s: line %v lacks latencyMs", c.rid, m)
		}
	}
}
