package main

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
)

// TestServeSIGTERMDrains sends SIGTERM to a real `evs serve` process while
// a verification is in flight: /readyz answers 503 at once, while the
// process still serves and the call in flight still finishes with its
// answer; then the process exits 0.
func TestServeSIGTERMDrains(t *testing.T) {
	t.Parallel()
	bin := buildEVS(t)
	dns := testkit.StartDNS(t)
	dns.AddRecord("good.example. 300 IN MX 10 mx.good.example.")
	dns.AddRecord("mx.good.example. 300 IN A 127.0.0.1")
	gate := testkit.NewRcptGate(0) // every RCPT held until released
	smtp := testkit.StartSMTP(t, testkit.SMTPOptions{IP: "127.0.0.1", Rcpt: func(addr string) string {
		gate.Wait(false)
		if strings.HasPrefix(addr, "alice@") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 user unknown"
	}})
	t.Cleanup(gate.Release)

	dir := t.TempDir()
	key := createLiveKey(t, dir)
	p := startServe(t, bin, liveEnv(dir, dns.Addr, smtp.Port, "EVS_DRAIN_TIMEOUT=60s"))
	ready := func() int {
		t.Helper()
		resp, err := http.Get(p.base + "/readyz")
		if err != nil {
			t.Fatalf("GET /readyz: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := ready(); s != 200 {
		t.Fatalf("/readyz before SIGTERM: %d", s)
	}
	type answer struct {
		status int
		body   string
	}
	inFlight := make(chan answer, 1)
	go func() {
		s, b := call(t, key, "POST", p.base+"/v1/verify", `{"email":"alice@good.example","mode":"full"}`)
		inFlight <- answer{s, string(b)}
	}()
	testkit.Eventually(t, 20*time.Second, testkit.Until(func() bool { return gate.Held() > 0 }, "the call's RCPT never arrived"))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, testkit.Until(func() bool { return ready() == 503 }, "/readyz never answered 503 after SIGTERM"))
	select {
	case <-p.done:
		t.Fatalf("the process exited with a call in flight: %v\n%s", p.cmd.ProcessState, p.err.String())
	case a := <-inFlight:
		t.Fatalf("the held call answered before its RCPT was: %+v", a)
	default:
	}
	gate.Release()
	if a := <-inFlight; a.status != 200 || !strings.Contains(a.body, `"deliverable"`) {
		t.Fatalf("the call in flight: %+v", a)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not exit after its last call")
	}
	if !p.cmd.ProcessState.Success() || !strings.Contains(p.err.String(), "draining calls in flight") {
		t.Fatalf("exit %v; stderr:\n%s", p.cmd.ProcessState, p.err.String())
	}
}
