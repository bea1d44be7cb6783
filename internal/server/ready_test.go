package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestReadyz: GET /readyz needs no key and shows no account data: 200
// while the store takes writes, 503 {"status":"unavailable"} while it does
// not (a full disk), 200 again once it does, with no restart; a probe's
// verdict answers the checks of the next second, so checks sent as fast as
// anyone likes are not writes as fast.
func TestReadyz(t *testing.T) {
	var o options
	fs := faulty(&o)
	h := start(t, o)
	ready := func() reply { t.Helper(); return h.do(req{path: server.ReadyPath}) }
	if r := ready(); r.status != 200 || readyStatus(t, r) != "ok" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("ready: %d %v %s", r.status, r.header, r.body)
	}
	fs.Down.Store(true)
	if r := ready(); r.status != 200 {
		t.Fatalf("within a second of a good probe: %d, want the reused 200", r.status)
	}
	h.clock.Advance(time.Second)
	r := ready()
	if r.status != 503 || readyStatus(t, r) != "unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("store cannot write: %d %v %s", r.status, r.header, r.body)
	}
	fs.Down.Store(false)
	h.clock.Advance(time.Second)
	if r := ready(); r.status != 200 {
		t.Fatalf("store writes again: %d %s", r.status, r.body)
	}
	if r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, headers: map[string]string{"Idempotency-Key": "after-disk-full"},
		body: `{"email":"accepted_email@x.example"}`}); r.status != 200 {
		t.Fatalf("an idempotent call once the store writes again: %d %s", r.status, r.body)
	}
	if r := h.do(req{method: "POST", path: server.ReadyPath}); r.status != 405 || r.errorCode(t) != "method_not_allowed" {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
}

// readyStatus is the status of a /readyz reply, whose body also carries
// the egress object (egress_test.go).
func readyStatus(t *testing.T, r reply) string {
	t.Helper()
	var b struct {
		Status string          `json:"status"`
		Egress json.RawMessage `json:"egress"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil || len(b.Egress) == 0 || b.Egress[0] != '{' {
		t.Fatalf("/readyz body %s: want a status and an egress object (%v)", r.body, err)
	}
	return b.Status
}

// faulty makes the server of o run on a FaultyStore over the harness's
// store, and returns it.
func faulty(o *options) *testkit.FaultyStore {
	fs := &testkit.FaultyStore{}
	o.wrapStore = func(s server.Store) server.Store { fs.EmbeddedStore = s; return fs }
	return fs
}
