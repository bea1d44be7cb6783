package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestDrain: once the server is told to stop (SIGTERM in `evs serve`),
// /readyz answers 503 {"status":"draining"} at once while a call in flight
// still runs; the listener stays open meanwhile, so a new call is still
// served, and the call in flight finishes with its full answer before the
// server stops.
func TestDrain(t *testing.T) {
	gate := testkit.NewRcptGate(0) // hold every RCPT until released
	h := start(t, options{replyTimeout: 30 * time.Second, rcpt: func(addr string) string {
		gate.Wait(false)
		if strings.HasPrefix(addr, "alice@") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 user unknown"
	}})
	t.Cleanup(gate.Release)
	if r := h.do(req{path: server.ReadyPath}); r.status != 200 {
		t.Fatalf("before: %d %s", r.status, r.body)
	}
	inFlight := make(chan reply, 1)
	go func() {
		inFlight <- h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"alice@good.example","mode":"full"}`})
	}()
	waitFor(t, "the call's RCPT to be held", func() bool { return gate.Held() > 0 })

	stopped := make(chan struct{})
	go func() { h.stop(); close(stopped) }()
	waitFor(t, "/readyz to answer 503", func() bool { return h.do(req{path: server.ReadyPath}).status == 503 })
	r := h.do(req{path: server.ReadyPath})
	if r.status != 503 || readyStatus(t, r) != "draining" {
		t.Fatalf("draining: %d %s", r.status, r.body)
	}
	if r := h.do(req{path: server.HealthPath}); r.status != 200 {
		t.Fatalf("/healthz while draining: %d, want 200 (alive)", r.status)
	}
	if r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"accepted_email@x.example"}`}); r.status != 200 {
		t.Fatalf("a new call while draining: %d %s", r.status, r.body)
	}
	select {
	case <-stopped:
		t.Fatal("the server stopped with a call in flight")
	case r := <-inFlight:
		t.Fatalf("the held call answered before its RCPT was: %d %s", r.status, r.body)
	default:
	}
	gate.Release()
	if r := <-inFlight; r.status != 200 || !strings.Contains(string(r.body), `"deliverable"`) {
		t.Fatalf("the call in flight: %d %s", r.status, r.body)
	}
	<-stopped
}

// waitFor polls cond until it holds (testkit.Eventually); the bound only
// keeps a broken build from hanging the run.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, testkit.Until(cond, "waiting for %s", what))
}

// TestDrainTimeout: a call still running when EVS_DRAIN_TIMEOUT is over is
// cut off (its connection closed), and Serve says so, naming the variable,
// rather than waiting on.
func TestDrainTimeout(t *testing.T) {
	gate := testkit.NewRcptGate(0)
	h := start(t, options{replyTimeout: 30 * time.Second, rcpt: func(string) string { gate.Wait(false); return "250 2.1.5 OK" },
		server: func(o *server.Options) { o.Config.DrainTimeout = 300 * time.Millisecond }})
	t.Cleanup(gate.Release)
	inFlight := make(chan error, 1)
	go func() {
		hr, _ := http.NewRequest("POST", h.base+"/v1/verify", strings.NewReader(`{"email":"alice@good.example","mode":"full"}`))
		hr.Header.Set("X-Api-Key", h.liveKey)
		hr.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(hr)
		if err == nil {
			resp.Body.Close()
		}
		inFlight <- err
	}()
	waitFor(t, "the call's RCPT to be held", func() bool { return gate.Held() > 0 })
	h.cancel()
	h.cancel = nil // stopped here, not by the harness
	err := <-h.done
	if err == nil || !strings.Contains(err.Error(), "EVS_DRAIN_TIMEOUT") {
		t.Fatalf("Serve after the drain timeout with a call in flight: %v", err)
	}
	if err := <-inFlight; err == nil {
		t.Fatal("the call in flight got an answer after it was cut off")
	}
}
