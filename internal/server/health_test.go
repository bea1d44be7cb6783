package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/server"
)

// TestHealthz: GET /healthz needs no key and shows no account data: 200
// {"status":"ok"} while the store answers, 503 while it does not, 200
// again once it does. It is not behind the authorizer (a bad key is
// ignored, and no number of calls with one is throttled as failed
// authentications); other methods get 405.
func TestHealthz(t *testing.T) {
	var o options
	fs := faulty(&o)
	h := start(t, o)
	health := func(key string) reply {
		t.Helper()
		return h.do(req{path: server.HealthPath, key: key})
	}
	for i := 0; i < 30; i++ { // more than the 20 failed authentications a second allowed
		r := health("evs." + strings.Repeat("A", 43))
		if r.status != 200 || string(r.body) != `{"status":"ok"}` || r.header.Get("Content-Type") != "application/json" || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("healthy, call %d: %d %v %s", i, r.status, r.header, r.body)
		}
	}
	if r := health(""); r.status != 200 || string(r.body) != `{"status":"ok"}` {
		t.Fatalf("without a key: %d %s", r.status, r.body)
	}
	// The bad key above counted for nothing: the API still answers this
	// client.
	if r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@x.example","mode":"quick"}`}); r.status != 200 {
		t.Fatalf("the API after the health checks: %d", r.status)
	}

	fs.Down.Store(true)
	if r := health(""); r.status != 503 || string(r.body) != `{"status":"unavailable"}` || r.header.Get("Retry-After") == "" {
		t.Fatalf("store down: %d %v %s", r.status, r.header, r.body)
	}
	fs.Down.Store(false)
	if r := health(""); r.status != 200 {
		t.Fatalf("store back: %d %s", r.status, r.body)
	}

	for _, m := range []string{http.MethodPost, http.MethodDelete} {
		if r := h.do(req{method: m, path: server.HealthPath}); r.status != 405 || r.errorCode(t) != "method_not_allowed" || r.header.Get("Allow") != "GET, HEAD" {
			t.Fatalf("%s: %d %v %s", m, r.status, r.header, r.body)
		}
	}
	resp, err := http.Head(h.base + server.HealthPath)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HEAD: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestHealthzClosedStore: a store that is closed does not answer: 503.
func TestHealthzClosedStore(t *testing.T) {
	h := start(t, options{})
	if r := h.do(req{path: server.HealthPath}); r.status != 200 {
		t.Fatalf("open: %d", r.status)
	}
	h.st.Close()
	if r := h.do(req{path: server.HealthPath}); r.status != 503 || string(r.body) != `{"status":"unavailable"}` {
		t.Fatalf("closed: %d %s", r.status, r.body)
	}
}
