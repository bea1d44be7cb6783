package verify_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// TestEngineReasonsThroughSOCKS5 runs every reason scenario again with the
// engine built as the Lambdas build it with a SOCKS5 exit (EVS_SMTP=proxy,
// EVS_SMTP_PROXY), through a real SOCKS5 server (danted). The verdicts must
// be the same, and every connection a mail server saw must come from the
// proxy's external address: one made directly comes from 127.0.0.1, so a
// bypassed proxy fails the test.
func TestEngineReasonsThroughSOCKS5(t *testing.T) {
	t.Parallel()
	proxy := testkit.SOCKS5(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if from, err := proxy.CheckConnect(ctx); err != nil || from != proxy.External {
		t.Fatalf("the SOCKS5 proxy does not work as the test needs (connections from %q, want %s): %v", from, proxy.External, err)
	}

	w := startPeers(t, reasonMTAs(), reasonRecords)
	w.dns.SetRcode(reasonServFail, dns.RcodeServerFailure)
	vars := map[string]string{
		"EVS_SMTP":         "proxy",
		"EVS_SMTP_PROXY":   proxy.URL,
		"EVS_DNS_SERVERS":  w.dns.Addr,
		"EVS_SMTP_PORT":    fmt.Sprint(w.port),
		"EVS_SMTP_HELO":    "probe.evs.test",
		"EVS_EGRESS_ALLOW": "127.0.0.0/8",
	}
	cfg, err := config.FromEnv(func(k string) string { return vars[k] }, true)
	if err != nil {
		t.Fatal(err)
	}
	engine, _, err := verify.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("verdicts", func(t *testing.T) {
		for _, c := range reasonCases {
			t.Run(c.email+"/"+c.mode, func(t *testing.T) {
				// Build has no knob for the reply timeout (30s): the silent
				// server's case ends at this deadline instead, so the cases
				// run in parallel to keep the test short.
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				d := engine.Verify(ctx, verify.Inspect(c.email), evs.Mode(c.mode))
				c.check(t, d)
				// Through an exit, a server that refuses the connection
				// is the exit's reply: no verdict.
				if verify.ExitDown(d.Checks.SMTP) != strings.HasSuffix(c.email, "@dead.example") {
					t.Fatalf("exit down %v: %+v", verify.ExitDown(d.Checks.SMTP), d.Checks.SMTP)
				}
			})
		}
	})

	total := 0
	for _, s := range w.smtp {
		for _, from := range s.Clients() {
			total++
			if from != proxy.External {
				t.Errorf("the mail server on %s got a connection from %s, not through the proxy (%s)", s.Addr, from, proxy.External)
			}
		}
	}
	if total == 0 {
		t.Fatal("no mail server got a connection")
	}
}

// TestEngineExitDown: every way our SMTP exit fails is no verdict
// (ExitDown: the callers retry or answer 503, contract section 16): it
// cannot be reached, hangs (silent, or answering the greeting and never
// the CONNECT, bounded by EVS_SMTP_EXIT_TIMEOUT), refuses us by its rules,
// or reports that it could not reach the receiving server, which cannot
// be told from a fault of its own route.
func TestEngineExitDown(t *testing.T) {
	t.Parallel()
	proxy := testkit.SOCKS5(t)
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: func(addr string) string {
		if strings.HasPrefix(addr, "user@") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 no such user"
	}})
	dnsSrv := testkit.StartDNS(t)
	for _, rr := range []string{
		"up.example. 300 IN MX 10 mx.up.example.", "mx.up.example. 300 IN A 127.0.0.1",
		// Public, so our egress policy lets it through to the exit, whose
		// rules (loopback only) refuse it: nothing leaves the machine.
		"ruleset.example. 300 IN MX 10 mx.ruleset.example.", "mx.ruleset.example. 300 IN A 8.8.8.8",
		// Nothing listens there: the exit reports the server's refusal.
		"refused.example. 300 IN MX 10 mx.refused.example.", "mx.refused.example. 300 IN A 127.0.0.9",
	} {
		dnsSrv.AddRecord(rr)
	}
	engine := func(proxyURL string) *verify.Engine {
		vars := map[string]string{
			"EVS_SMTP": "proxy", "EVS_SMTP_PROXY": proxyURL, "EVS_DNS_SERVERS": dnsSrv.Addr,
			"EVS_SMTP_PORT": fmt.Sprint(peer.Port), "EVS_SMTP_HELO": "probe.evs.test", "EVS_EGRESS_ALLOW": "127.0.0.0/8",
			"EVS_SMTP_EXIT_TIMEOUT": "300ms",
		}
		cfg, err := config.FromEnv(func(k string) string { return vars[k] }, true)
		if err != nil {
			t.Fatal(err)
		}
		e, _, err := verify.Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// An exit that is not there: a loopback port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	dead := engine("socks5://" + closed)
	live := engine(proxy.URL)
	cases := []struct {
		name     string
		engine   *verify.Engine
		email    string
		exitDown bool
		want     evs.Status
	}{
		{"the exit is not there", dead, "user@up.example", true, evs.Unknown},
		{"the exit refuses us by its rules", live, "user@ruleset.example", true, evs.Unknown},
		{"the exit is silent", engine(testkit.StartFaultySOCKS5(t, "127.0.0.1", testkit.SOCKS5Fault{Silent: true}).URL()), "user@up.example", true, evs.Unknown},
		{"the exit answers the greeting, never the CONNECT", engine(testkit.StartFaultySOCKS5(t, "127.0.0.1", testkit.SOCKS5Fault{}).URL()), "user@up.example", true, evs.Unknown},
		{"the exit could not reach the server", live, "user@refused.example", true, evs.Unknown},
		{"the exit works", live, "user@up.example", false, evs.Deliverable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			d := c.engine.Verify(ctx, verify.Inspect(c.email), evs.ModeFull)
			if verify.ExitDown(d.Checks.SMTP) != c.exitDown || d.Status() != c.want {
				t.Fatalf("%s: %s/%s smtp %+v; want exitDown %v, %s", c.email, d.Status(), d.Reason, d.Checks.SMTP, c.exitDown, c.want)
			}
		})
	}
}
