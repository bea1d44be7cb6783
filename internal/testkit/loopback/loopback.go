// Package loopback gives tests verify engines whose world is on loopback:
// a DNS server holding the test's records, and SMTP probes that may dial
// 127.0.0.0/8 only, reaching the test's peer. It is a package of its own,
// not part of testkit, because the engine's packages use testkit in their
// own tests.
package loopback

import (
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// Mail is the DNS server and resolver the engines of one test share, and
// the port their probes dial.
type Mail struct {
	// DNS is the server the engines resolve through.
	DNS  *testkit.DNSServer
	res  *dnscheck.Resolver
	port int
}

// New starts a DNS server for the test; the engines' probes dial port.
func New(tb testing.TB, port int) *Mail {
	tb.Helper()
	dns := testkit.StartDNS(tb)
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{dns.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	return &Mail{DNS: dns, res: res, port: port}
}

// Host makes host, on 127.0.0.1, the mail host of domain.
func (m *Mail) Host(domain, host string) {
	m.DNS.AddRecord(domain + ". 300 IN MX 10 " + host + ".")
	m.DNS.AddRecord(host + ". 300 IN A 127.0.0.1")
}

// Engine is an engine configured as cfg otherwise, resolving through m's
// DNS server, whose SMTP prober is configured as probe otherwise (HELO
// probe.evs.test unless probe names one).
func (m *Mail) Engine(tb testing.TB, cfg verify.Config, probe smtpprobe.Config) *verify.Engine {
	tb.Helper()
	egress, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		tb.Fatal(err)
	}
	if probe.HELO == "" {
		probe.HELO = "probe.evs.test"
	}
	probe.Port, probe.Resolver, probe.Egress = m.port, m.res, egress
	p, err := smtpprobe.New(probe)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Resolver, cfg.Prober = m.res, verify.SMTP(p)
	eng, err := verify.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return eng
}
