package verify_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// TestEngineAppliesEgressAllow builds the engine the way evs and the
// Lambdas do, from the environment: a domain whose MX is a loopback peer
// is not probed unless EVS_EGRESS_ALLOW lists loopback.
func TestEngineAppliesEgressAllow(t *testing.T) {
	t.Parallel()
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{IP: "127.0.0.2"})
	dns := testkit.StartDNS(t)
	dns.AddRecord("corp.example. 300 IN MX 10 mx.corp.example.")
	dns.AddRecord("mx.corp.example. 300 IN A 127.0.0.2")
	base := map[string]string{"EVS_DNS_SERVERS": dns.Addr, "EVS_SMTP_PORT": fmt.Sprint(peer.Port), "EVS_SMTP_HELO": "probe.evs.test"}

	tests := []struct {
		allow  string
		reason evs.Reason
		dns    string
		conns  int
	}{
		{"", evs.ReasonNoMailServer, evs.DNSMXNotPublic, 0},
		{"10.0.0.0/8", evs.ReasonNoMailServer, evs.DNSMXNotPublic, 0},
		{"127.0.0.0/8", evs.ReasonAcceptAll, evs.DNSOK, 1},
	}
	for _, tc := range tests {
		vars := map[string]string{"EVS_EGRESS_ALLOW": tc.allow}
		for k, v := range base {
			vars[k] = v
		}
		cfg, err := config.FromEnv(func(k string) string { return vars[k] }, false)
		if err != nil {
			t.Fatal(err)
		}
		e, _, err := verify.Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		before := peer.Connections()
		d := e.Verify(context.Background(), verify.Inspect("a@corp.example"), evs.ModeFull)
		if d.Reason != tc.reason || d.Checks.DNS.Result != tc.dns {
			t.Errorf("allow %q: %s, dns %s, smtp %+v; want %s, dns %s", tc.allow, d.Reason, d.Checks.DNS.Result, d.Checks.SMTP, tc.reason, tc.dns)
		}
		if n := peer.Connections() - before; n != tc.conns {
			t.Errorf("allow %q: the peer got %d connections, want %d", tc.allow, n, tc.conns)
		}
	}
}
