package verify_test

// What the Exim and OpenSMTPD tests share: an engine on a loopback
// internet, and cases checked through it.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// mtaCase is one address, the reply a real MTA sends for it (recorded from
// that MTA: its words, not ours; the lines of a multi-line reply joined
// with a space, as the evidence shows them), and the verdicts a careful
// verifier may give, the first the preferred one. The verdicts are the
// specification (contract, section 2): a test whose MTA sends a plain
// "no such user" in words the classifier does not know yet fails, and
// says so, rather than expect the wrong verdict.
type mtaCase struct {
	email    string
	code     int
	enhanced string
	message  string
	reasons  []evs.Reason
	why      string
}

// loopbackEngine is an engine whose DNS (a loopback server) points the MX
// of each domain of mx at "mx.DOMAIN", whose address is the IP mx gives,
// and whose SMTP probe talks to port on loopback.
func loopbackEngine(t *testing.T, port int, mx map[string]string) *verify.Engine {
	t.Helper()
	dns := testkit.StartDNS(t)
	for domain, ip := range mx {
		dns.AddRecord(fmt.Sprintf("%s. 300 IN MX 10 mx.%s.", domain, domain))
		dns.AddRecord(fmt.Sprintf("mx.%s. 300 IN A %s", domain, ip))
	}
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{dns.Addr}, Timeout: 500 * time.Millisecond, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: port, Resolver: res, Egress: loopbackAllowed(t),
		DialTimeout: time.Second, ReplyTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := verify.New(verify.Config{Resolver: res, Prober: verify.SMTP(p), RandomLocal: func() string { return "zz-random-probe" }})
	if err != nil {
		t.Fatal(err)
	}
	return engine
}

// checkMTACases verifies each case through the engine and checks what the
// MTA said (the evidence must be its reply, unchanged) and the verdict.
func checkMTACases(t *testing.T, mta string, engine *verify.Engine, cases []mtaCase) {
	for _, c := range cases {
		t.Run(c.email, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			d := engine.Verify(ctx, verify.Inspect(c.email), evs.ModeFull)
			s := d.Checks.SMTP
			if s.Code != c.code || s.EnhancedCode != c.enhanced || s.Message != c.message {
				t.Errorf("%s said %d %s %q, want %d %s %q", mta, s.Code, s.EnhancedCode, s.Message, c.code, c.enhanced, c.message)
			}
			if s.Host != "mx."+c.email[strings.IndexByte(c.email, '@')+1:] {
				t.Errorf("answered by %q", s.Host)
			}
			want := smtpResultOf[c.reasons[0]]
			if c.reasons[0] == evs.ReasonAcceptAll {
				want = evs.SMTPAcceptAll
			}
			if !slices.Contains(c.reasons, d.Reason) || s.Result != want || d.Status() != evs.StatusOf(c.reasons[0]) {
				t.Errorf("verdict %s/%s (smtp %s: %s) for %d %s %q; want %s/%v, smtp %s (%s)",
					d.Status(), d.Reason, s.Result, s.Detail, s.Code, s.EnhancedCode, s.Message, evs.StatusOf(c.reasons[0]), c.reasons, want, c.why)
			}
		})
	}
}
