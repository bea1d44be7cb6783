package verify_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// world is a small internet on loopback: an authoritative DNS server and
// scripted SMTP servers on 127.0.0.x, all on one port as real MX hosts are.
type world struct {
	t      *testing.T
	dns    *testkit.DNSServer
	port   int
	smtp   []*testkit.SMTPServer
	engine *verify.Engine
	// facts is the engine's domain facts, fresh for each world.
	facts *cache.Facts
}

// mta describes one loopback mail server.
type mta struct {
	ip   string
	opts testkit.SMTPOptions
}

func newWorld(t *testing.T, mtas []mta, records []string, timeout time.Duration) *world {
	t.Helper()
	w := startPeers(t, mtas, records)
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{w.dns.Addr}, Timeout: 500 * time.Millisecond, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: w.port, Resolver: res, Egress: loopbackAllowed(t), DialTimeout: 300 * time.Millisecond, ReplyTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	w.facts = cache.NewFacts(cache.FactsConfig{})
	w.engine, err = verify.New(verify.Config{Resolver: res, Prober: verify.SMTP(p), RandomLocal: func() string { return "zz-random-probe" }, Facts: w.facts})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// startPeers starts the DNS server and the mail servers of a world, without
// an engine.
func startPeers(t *testing.T, mtas []mta, records []string) *world {
	t.Helper()
	w := &world{t: t, dns: testkit.StartDNS(t)}
	for i, m := range mtas {
		o := m.opts
		o.IP = m.ip
		o.Port = w.port
		s := testkit.StartSMTP(t, o)
		if i == 0 {
			w.port = s.Port
		}
		w.smtp = append(w.smtp, s)
	}
	for _, rr := range records {
		w.dns.AddRecord(rr)
	}
	return w
}

// loopbackAllowed is the egress policy of tests whose peers listen on
// loopback, which the default policy refuses.
func loopbackAllowed(tb testing.TB) *config.EgressPolicy {
	tb.Helper()
	p, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func rcptTable(m map[string]string, def string) func(string) string {
	return func(addr string) string {
		local := addr[:strings.IndexByte(addr, '@')]
		if r, ok := m[local]; ok {
			return r
		}
		return def
	}
}

// reasonMTAs and reasonRecords are the small internet of the reason
// scenarios; reasonCases are what each address must give there. They run
// once with a direct engine (TestEngineReasons) and once through a real
// SOCKS5 exit (TestEngineReasonsThroughSOCKS5).
func reasonMTAs() []mta {
	normal := rcptTable(map[string]string{
		"alice":     "250 2.1.5 OK",
		"full":      "552 5.2.2 <full@corp.example>: mailbox full",
		"full4":     "452 4.2.2 Mailbox full",
		"grey":      "451 4.7.1 Greylisted, please try again later",
		"disabled":  "550 5.2.1 The email account that you tried to reach is disabled.",
		"blocked":   "554 5.7.1 Service unavailable; Client host [127.0.0.1] blocked using zen.spamhaus.org",
		"ratelimit": "452 4.5.3 Too many recipients",
	}, "550 5.1.1 <x>: Recipient address rejected: User unknown in virtual mailbox table")
	return []mta{
		{ip: "127.0.0.2", opts: testkit.SMTPOptions{Rcpt: normal}},
		{ip: "127.0.0.3", opts: testkit.SMTPOptions{Rcpt: func(string) string { return "250 2.1.5 OK" }}}, // accept-all
		{ip: "127.0.0.5", opts: testkit.SMTPOptions{Silent: true}},
		{ip: "127.0.0.6", opts: testkit.SMTPOptions{Rcpt: normal, StartTLS: true}},
		// A greeting whose "220-" lines end in a refusal of our address.
		{ip: "127.0.0.7", opts: testkit.SMTPOptions{Rcpt: normal,
			Banner: "220-mx.banner.example ESMTP\r\n554 5.7.1 Client host [127.0.0.1] blocked using zen.spamhaus.org"}},
	}
}

var reasonRecords = []string{
	"corp.example. 300 IN MX 10 mx.corp.example.",
	"mx.corp.example. 300 IN A 127.0.0.2",
	"catchall.example. 300 IN MX 10 mx.catchall.example.",
	"mx.catchall.example. 300 IN A 127.0.0.3",
	"nullmx.example. 300 IN MX 0 .",
	"nomail.example. 300 IN TXT \"v=spf1 -all\"",
	"implicit.example. 300 IN A 127.0.0.2",
	"dead.example. 300 IN MX 10 mx.dead.example.",
	"mx.dead.example. 300 IN A 127.0.0.4", // nothing listens there
	"silent.example. 300 IN MX 10 mx.silent.example.",
	"mx.silent.example. 300 IN A 127.0.0.5",
	"fallback.example. 300 IN MX 10 mx1.fallback.example.",
	"fallback.example. 300 IN MX 20 mx2.fallback.example.",
	"mx1.fallback.example. 300 IN A 127.0.0.4",
	"mx2.fallback.example. 300 IN A 127.0.0.2",
	"tls.example. 300 IN MX 10 mx.tls.example.",
	"mx.tls.example. 300 IN A 127.0.0.6",
	"banner.example. 300 IN MX 10 mx.banner.example.",
	"mx.banner.example. 300 IN A 127.0.0.7",
	"mailinator.com. 300 IN MX 10 mx.catchall.example.",
	"servfail.example. 300 IN MX 10 mx.corp.example.",
}

// reasonServFail is the domain whose lookups the DNS server fails.
const reasonServFail = "servfail.example."

// reasonCase is one address of the reason scenarios and its verdict.
type reasonCase struct {
	email, mode string
	reason      evs.Reason
	dns, smtp   string
	code        int
}

// check fails the test unless d is the case's verdict with its evidence.
func (c reasonCase) check(t *testing.T, d evs.Decision) {
	t.Helper()
	if d.Reason != c.reason || d.Checks.DNS.Result != c.dns || d.Checks.SMTP.Result != c.smtp || d.Checks.SMTP.Code != c.code {
		t.Fatalf("got %s dns=%s smtp=%s code=%d (%s), want %s dns=%s smtp=%s code=%d",
			d.Reason, d.Checks.DNS.Result, d.Checks.SMTP.Result, d.Checks.SMTP.Code, d.Checks.SMTP.Detail, c.reason, c.dns, c.smtp, c.code)
	}
	if d.Status() != evs.StatusOf(c.reason) || d.Email != c.email || d.Mode != evs.Mode(c.mode) {
		t.Fatalf("decision header: %+v", d)
	}
	if d.Reason != evs.ReasonInvalidSyntax && d.Normalized == "" {
		t.Fatal("no normalized address")
	}
}

var reasonCases = []reasonCase{
	{"alice@corp.example", "full", evs.ReasonAcceptedEmail, "ok", "accepted", 250},
	{"alice@tls.example", "full", evs.ReasonAcceptedEmail, "ok", "accepted", 250},
	{"alice@fallback.example", "full", evs.ReasonAcceptedEmail, "ok", "accepted", 250},
	{"alice@implicit.example", "full", evs.ReasonAcceptedEmail, "ok", "accepted", 250},
	{"nobody@corp.example", "full", evs.ReasonRejectedEmail, "ok", "rejected", 550},
	{"disabled@corp.example", "full", evs.ReasonRejectedEmail, "ok", "rejected", 550},
	{"full@corp.example", "full", evs.ReasonMailboxFull, "ok", "full", 552},
	{"full4@corp.example", "full", evs.ReasonMailboxFull, "ok", "full", 452},
	{"grey@corp.example", "full", evs.ReasonGreylisted, "ok", "greylisted", 451},
	{"ratelimit@corp.example", "full", evs.ReasonGreylisted, "ok", "greylisted", 452},
	{"blocked@corp.example", "full", evs.ReasonBlocked, "ok", "unreachable", 554},
	{"anyone@catchall.example", "full", evs.ReasonAcceptAll, "ok", "accept_all", 250},
	{"x@mailinator.com", "full", evs.ReasonDisposable, "ok", "accept_all", 250},
	{"a@nullmx.example", "full", evs.ReasonNoMailServer, "null_mx", "skipped", 0},
	{"a@nomail.example", "full", evs.ReasonNoMailServer, "no_records", "skipped", 0},
	{"a@missing.example", "full", evs.ReasonInvalidDomain, "nxdomain", "skipped", 0},
	{"a@servfail.example", "full", evs.ReasonDNSError, "error", "skipped", 0},
	{"alice@banner.example", "full", evs.ReasonBlocked, "ok", "unreachable", 554},
	{"a@dead.example", "full", evs.ReasonSMTPUnreachable, "ok", "unreachable", 0},
	{"a@silent.example", "full", evs.ReasonTimeout, "ok", "timeout", 0},
	{"alice@corp.example", "quick", evs.ReasonMailboxNotChecked, "ok", "skipped", 0},
	{"a..b@corp.example", "full", evs.ReasonInvalidSyntax, "not_checked", "skipped", 0},
}

// TestEngineReasons reaches every reason code through the engine's public
// API against real loopback DNS and SMTP peers, and checks the evidence.
func TestEngineReasons(t *testing.T) {
	t.Parallel()
	w := newWorld(t, reasonMTAs(), reasonRecords, 400*time.Millisecond)
	w.dns.SetRcode(reasonServFail, dns.RcodeServerFailure)
	for _, c := range reasonCases {
		t.Run(c.email+"/"+c.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c.check(t, w.engine.Verify(ctx, verify.Inspect(c.email), evs.Mode(c.mode)))
		})
	}
	t.Run("tls evidence", func(t *testing.T) {
		d := w.engine.Verify(context.Background(), verify.Inspect("alice@tls.example"), evs.ModeFull)
		if !d.Checks.SMTP.TLS || d.Checks.SMTP.Host != "mx.tls.example" || d.Checks.SMTP.EnhancedCode != "2.1.5" {
			t.Fatalf("smtp evidence: %+v", d.Checks.SMTP)
		}
	})
	t.Run("flags and suggestion", func(t *testing.T) {
		d := w.engine.Verify(context.Background(), verify.Inspect("Postmaster@gmial.com"), evs.ModeQuick)
		if !d.Flags.Role || d.Suggestion == nil || *d.Suggestion != "Postmaster@gmail.com" {
			t.Fatalf("flags %+v suggestion %v", d.Flags, d.Suggestion)
		}
	})
}

// TestEngineOffMode: without a prober, full mode says SMTP was skipped.
func TestEngineOffMode(t *testing.T) {
	t.Parallel()
	srv := testkit.StartDNS(t)
	srv.AddRecord("corp.example. 300 IN MX 10 mx.corp.example.")
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := verify.New(verify.Config{Resolver: res, SMTPOffDetail: "SMTP probing is off here (EVS_SMTP=off)"})
	if err != nil {
		t.Fatal(err)
	}
	d := e.Verify(context.Background(), verify.Inspect("alice@corp.example"), evs.ModeFull)
	if d.Reason != evs.ReasonMailboxNotChecked || d.Checks.SMTP.Result != "skipped" || !strings.Contains(d.Checks.SMTP.Detail, "EVS_SMTP=off") {
		t.Fatalf("%+v", d)
	}
}

// TestVerifyDomainSharesConnection: a batch of one domain's addresses uses
// one SMTP connection and one accept-all probe.
func TestVerifyDomainSharesConnection(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var rcpts []string
	w := newWorld(t, []mta{{ip: "127.0.0.2", opts: testkit.SMTPOptions{Rcpt: func(a string) string {
		mu.Lock()
		rcpts = append(rcpts, a)
		mu.Unlock()
		if strings.HasPrefix(a, "zz-random-probe") || strings.HasPrefix(a, "nobody") {
			return "550 5.1.1 no such user"
		}
		return "250 OK"
	}}}}, []string{
		"corp.example. 300 IN MX 10 mx.corp.example.",
		"mx.corp.example. 300 IN A 127.0.0.2",
	}, time.Second)
	emails := []string{"a@corp.example", "b@corp.example", "nobody@corp.example", "c@corp.example"}
	ds := w.engine.VerifyDomain(context.Background(), emails, evs.ModeFull)
	want := []evs.Reason{evs.ReasonAcceptedEmail, evs.ReasonAcceptedEmail, evs.ReasonRejectedEmail, evs.ReasonAcceptedEmail}
	for i, d := range ds {
		if d.Reason != want[i] || d.Email != emails[i] {
			t.Fatalf("%d: %s %s", i, d.Email, d.Reason)
		}
	}
	probes := 0
	for _, r := range rcpts {
		if strings.HasPrefix(r, "zz-random-probe") {
			probes++
		}
	}
	if probes != 1 || len(rcpts) != 5 {
		t.Fatalf("rcpts %v: want 4 addresses and 1 accept-all probe", rcpts)
	}
	// The domain's facts remember it: a second group, or a single
	// verification, probes no more.
	w.engine.VerifyDomain(context.Background(), []string{"d@corp.example"}, evs.ModeFull)
	w.engine.Verify(context.Background(), verify.Inspect("e@corp.example"), evs.ModeFull)
	probes = 0
	for _, r := range rcpts {
		if strings.HasPrefix(r, "zz-random-probe") {
			probes++
		}
	}
	if probes != 1 {
		t.Fatalf("accept-all probed %d times for one domain", probes)
	}
}

// TestVerifyDomainStopsWhenThrottled: once a server answers a RCPT with a
// 421 or a rate reply, the session asks nothing more. The addresses after
// it are marked not asked (no verdict about them), so a batch runs them
// again after the provider's pause instead of reading a closed channel as
// "unknown", or pressing a server that asked us to wait.
func TestVerifyDomainStopsWhenThrottled(t *testing.T) {
	t.Parallel()
	for _, reply := range []string{
		"421 4.7.0 Too many connections, closing transmission channel",
		"450 4.7.1 Rate limit exceeded, try again later",
	} {
		t.Run(reply[:3], func(t *testing.T) {
			var mu sync.Mutex
			var rcpts []string
			w := newWorld(t, []mta{{ip: "127.0.0.2", opts: testkit.SMTPOptions{Rcpt: func(a string) string {
				mu.Lock()
				defer mu.Unlock()
				rcpts = append(rcpts, a)
				switch {
				case strings.HasPrefix(a, "zz-random-probe"):
					return "550 5.1.1 no such user"
				case a == "b@corp.example":
					return reply
				}
				return "250 OK"
			}}}}, []string{
				"corp.example. 300 IN MX 10 mx.corp.example.",
				"mx.corp.example. 300 IN A 127.0.0.2",
			}, time.Second)
			ds := w.engine.VerifyDomain(context.Background(), []string{"a@corp.example", "b@corp.example", "c@corp.example", "d@corp.example"}, evs.ModeFull)
			mu.Lock()
			defer mu.Unlock()
			if want := []string{"a@corp.example", "zz-random-probe@corp.example", "b@corp.example"}; strings.Join(rcpts, " ") != strings.Join(want, " ") {
				t.Fatalf("asked %v, want %v and nothing after the throttling reply", rcpts, want)
			}
			if ds[0].Reason != evs.ReasonAcceptedEmail {
				t.Errorf("a: %s", ds[0].Reason)
			}
			if th, atOpen := verify.Throttled(ds[1].Checks.SMTP); !th || atOpen || verify.NotAsked(ds[1].Checks.SMTP) || strconv.Itoa(ds[1].Checks.SMTP.Code) != reply[:3] {
				t.Errorf("b: throttled %v at open %v, check %+v", th, atOpen, ds[1].Checks.SMTP)
			}
			for _, d := range ds[2:] {
				if !verify.NotAsked(d.Checks.SMTP) || d.Status() != evs.Unknown || d.Checks.SMTP.Code != 0 {
					t.Errorf("%s: %s %+v, want not asked", d.Email, d.Reason, d.Checks.SMTP)
				}
			}
		})
	}
}
