package verify_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// egressEngine is an engine probing with the given egress policy, against
// a loopback DNS server.
func egressEngine(t *testing.T, dns *testkit.DNSServer, port int, policy *config.EgressPolicy) *verify.Engine {
	t.Helper()
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{dns.Addr}, Timeout: 500 * time.Millisecond, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: port, Resolver: res, Egress: policy, DialTimeout: 300 * time.Millisecond, ReplyTimeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e, err := verify.New(verify.Config{Resolver: res, Prober: verify.SMTP(p), RandomLocal: func() string { return "zz-random-probe" }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestEgressMXNotPublic points domains at a loopback mail server in every
// way DNS allows. By default the server gets no connection and the
// verdict is no_mail_server / mx_not_public; with 127.0.0.0/8 allowed the
// same domains are probed.
func TestEgressMXNotPublic(t *testing.T) {
	t.Parallel()
	accept := testkit.SMTPOptions{Rcpt: func(string) string { return "250 2.1.5 OK" }}
	accept.IP = "127.0.0.2"
	peer := testkit.StartSMTP(t, accept)
	accept.IP, accept.Port = "127.0.0.1", peer.Port
	local := testkit.StartSMTP(t, accept) // what "localhost" reaches
	dns := testkit.StartDNS(t)
	for _, rr := range []string{
		"corp.example. 300 IN MX 10 mx.corp.example.",
		"mx.corp.example. 300 IN A 127.0.0.2",
		"iplit.example. 300 IN MX 10 127.0.0.2.",
		"localmx.example. 300 IN MX 10 localhost.",
		"implicit.example. 300 IN A 127.0.0.2",
		"mapped.example. 300 IN MX 10 mx.mapped.example.",
		"mx.mapped.example. 300 IN AAAA ::ffff:127.0.0.2",
		// The public-looking first choice is private; the second is the peer.
		"mixed.example. 300 IN MX 10 mx1.mixed.example.",
		"mixed.example. 300 IN MX 20 mx2.mixed.example.",
		"mx1.mixed.example. 300 IN A 10.0.0.1",
		"mx1.mixed.example. 300 IN A 169.254.169.254",
		"mx2.mixed.example. 300 IN A 127.0.0.2",
	} {
		dns.AddRecord(rr)
	}
	emails := []string{"a@corp.example", "a@iplit.example", "a@localmx.example", "a@implicit.example", "a@mapped.example", "a@mixed.example"}
	connections := func() int { return peer.Connections() + local.Connections() }
	ctx := context.Background()

	def := egressEngine(t, dns, peer.Port, nil)
	for _, email := range emails {
		d := def.Verify(ctx, verify.Inspect(email), evs.ModeFull)
		if d.Reason != evs.ReasonNoMailServer || d.Status() != evs.Undeliverable ||
			d.Checks.DNS.Result != evs.DNSMXNotPublic || d.Checks.SMTP.Result != evs.SMTPSkipped || len(d.Checks.DNS.MX) == 0 {
			t.Errorf("%s: %s/%s dns %+v smtp %+v, want undeliverable/no_mail_server with mx_not_public", email, d.Status(), d.Reason, d.Checks.DNS, d.Checks.SMTP)
		}
		// Quick mode never dials and is unchanged.
		if q := def.Verify(ctx, verify.Inspect(email), evs.ModeQuick); q.Reason != evs.ReasonMailboxNotChecked || q.Checks.DNS.Result != evs.DNSOK {
			t.Errorf("%s quick: %s dns %s", email, q.Reason, q.Checks.DNS.Result)
		}
	}
	for _, d := range def.VerifyDomain(ctx, []string{"a@corp.example", "b@corp.example"}, evs.ModeFull) {
		if d.Reason != evs.ReasonNoMailServer || d.Checks.DNS.Result != evs.DNSMXNotPublic {
			t.Errorf("VerifyDomain %s: %s dns %s", d.Email, d.Reason, d.Checks.DNS.Result)
		}
	}
	if n := connections(); n != 0 {
		t.Fatalf("the loopback peers got %d connections under the default policy", n)
	}

	allowed, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	open := egressEngine(t, dns, peer.Port, allowed)
	for _, email := range emails {
		before := connections()
		d := open.Verify(ctx, verify.Inspect(email), evs.ModeFull)
		if d.Reason != evs.ReasonAcceptAll || d.Checks.DNS.Result != evs.DNSOK {
			t.Errorf("%s allowed: %s dns %+v smtp %+v, want accept_all (the peer accepts anything)", email, d.Reason, d.Checks.DNS, d.Checks.SMTP)
		}
		if connections() == before {
			t.Errorf("%s allowed: the peer got no connection", email)
		}
	}
}

// TestEgressBoundedPerDomain gives a domain 30 MX hosts of 3 addresses
// each, all answering garbage: only the 5 most preferred hosts, 2
// addresses each, are contacted.
func TestEgressBoundedPerDomain(t *testing.T) {
	t.Parallel()
	dns := testkit.StartDNS(t)
	peers := make([][]*testkit.SMTPServer, 30)
	port := 0
	for i := range 30 {
		// Preferences are not in name order: 10*(i*7 mod 30) puts mx0,
		// mx13, mx26, mx9 and mx22 first.
		dns.AddRecord(fmt.Sprintf("many.example. 300 IN MX %d mx%d.many.example.", 10*(i*7%30)+10, i))
		for j := range 3 {
			ip := fmt.Sprintf("127.0.6.%d", 3*i+j+1)
			s := testkit.StartSMTP(t, testkit.SMTPOptions{IP: ip, Port: port, Banner: "HTTP/1.1 400 Bad Request"})
			port = s.Port
			peers[i] = append(peers[i], s)
			dns.AddRecord(fmt.Sprintf("mx%d.many.example. 300 IN A %s", i, ip))
		}
	}
	allowed, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	e := egressEngine(t, dns, port, allowed)
	d := e.Verify(context.Background(), verify.Inspect("a@many.example"), evs.ModeFull)
	if d.Reason != evs.ReasonSMTPUnreachable || len(d.Checks.DNS.MX) != 30 {
		t.Errorf("%s with %d MX hosts in the evidence, smtp %+v", d.Reason, len(d.Checks.DNS.MX), d.Checks.SMTP)
	}
	first := []int{0, 13, 26, 9, 22}
	total := 0
	for i, ss := range peers {
		n := 0
		for _, s := range ss {
			n += s.Connections()
		}
		total += n
		want := 0
		if slices.Contains(first, i) {
			want = 2
		}
		if n != want {
			t.Errorf("mx%d got %d connections, want %d", i, n, want)
		}
	}
	if total != 10 {
		t.Errorf("%d connection attempts, want 5 hosts x 2 addresses = 10", total)
	}
}
