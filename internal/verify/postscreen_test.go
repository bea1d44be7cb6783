package verify_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// TestEngineThroughPostscreen verifies addresses through the engine
// against a real Postfix with postscreen in front of it, as many sites run
// it: postscreen answers the first session of a client it has not seen
// with "450 4.3.2 Service currently unavailable" at RCPT and lets the
// client through to smtpd when it reconnects. Each case speaks from a
// loopback address of its own, so that each is a first contact; the
// Postfix log shows postscreen's refusal and its PASS NEW for it.
func TestEngineThroughPostscreen(t *testing.T) {
	t.Parallel()
	pf := testkit.StartPostfix(t, testkit.PostfixOptions{
		IP:         "127.0.7.1",
		Domains:    []string{"screened.example"},
		Mailboxes:  []string{"alice@screened.example"},
		Postscreen: true,
	})
	t.Logf("postfix with postscreen started in %v (%s)", pf.Startup, pf.Banner)
	dns := testkit.StartDNS(t)
	dns.AddRecord("screened.example. 300 IN MX 10 mx.screened.example.")
	dns.AddRecord("mx.screened.example. 300 IN A 127.0.7.1")
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{dns.Addr}, Timeout: 500 * time.Millisecond, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	// engineFrom is an engine whose probes leave from client, a loopback
	// address postscreen has not seen yet; pause is its ScreenPause.
	engineFrom := func(client string, pause time.Duration) *verify.Engine {
		egress := loopbackAllowed(t)
		p, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: pf.Port, Resolver: res, Egress: egress,
			Dialer:      &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(client)}, Control: egress.Control},
			DialTimeout: time.Second, ReplyTimeout: 10 * time.Second, ScreenPause: pause})
		if err != nil {
			t.Fatal(err)
		}
		e, err := verify.New(verify.Config{Resolver: res, Prober: verify.SMTP(p), RandomLocal: func() string { return "zz-random-probe" }})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, c := range []struct {
		client, email string
		code          int
		reason        evs.Reason
		status        evs.Status
		pause         time.Duration
	}{
		{"127.0.7.11", "alice@screened.example", 250, evs.ReasonAcceptedEmail, evs.Deliverable, 200 * time.Millisecond},
		{"127.0.7.12", "nobody@screened.example", 550, evs.ReasonRejectedEmail, evs.Undeliverable, 200 * time.Millisecond},
		// Without the reconnect (as before it existed) the same mailbox
		// is only greylisted: unknown, never undeliverable.
		{"127.0.7.13", "alice@screened.example", 450, evs.ReasonGreylisted, evs.Unknown, -1},
	} {
		t.Run(c.client+" "+c.email, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			d := engineFrom(c.client, c.pause).Verify(ctx, verify.Inspect(c.email), evs.ModeFull)
			s := d.Checks.SMTP
			if d.Reason != c.reason || d.Status() != c.status || s.Code != c.code {
				t.Fatalf("verdict %s/%s (smtp %s: %d %s %q, %s), want %s/%s with %d",
					d.Status(), d.Reason, s.Result, s.Code, s.EnhancedCode, s.Message, s.Detail, c.status, c.reason, c.code)
			}
			if c.code == 250 && s.Detail != "the server rejects unknown addresses" {
				t.Errorf("accept-all probe: %s", s.Detail)
			}
			// The verdict came from smtpd, after postscreen refused the
			// first contact from this client and passed it.
			wants := []string{
				"NOQUEUE: reject: RCPT from [" + c.client + "]:",
				"450 4.3.2 Service currently unavailable; from=<verify@probe.evs.test>, to=<" + c.email + ">",
				"PASS NEW [" + c.client + "]",
				"PASS OLD [" + c.client + "]",
			}
			if c.pause < 0 {
				wants = wants[:3]
			}
			for _, want := range wants {
				// postlogd writes a moment later.
				testkit.EventuallyEvery(t, 3*time.Second, 50*time.Millisecond, testkit.Until(func() bool { return strings.Contains(pf.Log(), want) }, "the Postfix log does not show %q", want))
			}
		})
	}
}
