package server_test

import (
	"net"
	"testing"
)

// TestVerifyExitDown: a /v1/verify whose session cannot open because our
// SMTP exit is not there answers 503 unavailable with Retry-After, not a
// verdict about the address (contract, section 16); an address that needs
// no session is still answered.
func TestVerifyExitDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // an exit that is not there
	ln.Close()
	h := start(t, options{smtpProxy: "socks5://" + closed})
	r := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"alice@good.example","mode":"full"}`})
	if r.status != 503 || r.errorCode(t) != "unavailable" || r.header.Get("Retry-After") != "30" {
		t.Fatalf("exit down: %d %q %s, want 503 unavailable with Retry-After 30", r.status, r.header.Get("Retry-After"), r.body)
	}
	// Quick mode opens no session: a verdict as always.
	if r := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"alice@good.example","mode":"quick"}`}); r.status != 200 {
		t.Fatalf("quick mode with the exit down: %d %s", r.status, r.body)
	}
	if n := len(h.smtp.Clients()); n != 0 {
		t.Fatalf("the mail server saw %d connections with the exit down", n)
	}
}
