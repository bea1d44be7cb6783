package verify_test

import (
	"context"
	"fmt"
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
				c.check(t, engine.Verify(ctx, c.email, evs.Mode(c.mode)))
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
