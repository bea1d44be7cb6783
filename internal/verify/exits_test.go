package verify_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// TestBuildWithSeveralExits: the engine built as the Lambdas build it,
// from an EVS_SMTP_PROXY that lists two real Dante exits, spreads
// providers over both, and each provider's sessions all come through one.
func TestBuildWithSeveralExits(t *testing.T) {
	t.Parallel()
	const exitA, exitB = "127.0.0.41", "127.0.0.42"
	a, b := testkit.StartDante(t, exitA), testkit.StartDante(t, exitB)
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{})
	dns := testkit.StartDNS(t)
	const providers = 12
	for i := range providers {
		dns.AddRecord(fmt.Sprintf("p%d.example. 300 IN MX 10 mx.p%d.example.", i, i))
		dns.AddRecord(fmt.Sprintf("mx.p%d.example. 300 IN A 127.0.0.1", i))
	}
	vars := map[string]string{
		"EVS_SMTP_PROXY":   a.URL() + "#" + exitA + "," + b.URL() + "#" + exitB,
		"EVS_DNS_SERVERS":  dns.Addr,
		"EVS_SMTP_PORT":    fmt.Sprint(peer.Port),
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
	used := map[string]int{}
	for i := range providers {
		var from string
		for round := range 3 {
			n := len(peer.Clients())
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			d := engine.Verify(ctx, verify.Inspect(fmt.Sprintf("user%d@p%d.example", round, i)), evs.ModeFull)
			cancel()
			if d.Checks.SMTP.Code != 250 {
				t.Fatalf("p%d: %+v", i, d.Checks.SMTP)
			}
			for _, c := range peer.Clients()[n:] {
				if from == "" {
					from = c
				}
				if c != from || (c != exitA && c != exitB) {
					t.Fatalf("p%d's sessions came from %v, want one exit", i, peer.Clients())
				}
			}
		}
		used[from]++
	}
	if used[exitA] == 0 || used[exitB] == 0 {
		t.Fatalf("%d providers over the exits: %v, want both used", providers, used)
	}
}
