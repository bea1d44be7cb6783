package verify_test

import (
	"context"
	"fmt"
	"net"
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

// The loopback addresses of the Postfix world: one instance, its main
// listener and one listener per setting that must apply to one domain only
// (a sender or client refusal, a failing mailbox table).
const (
	pfMain        = "127.0.0.51"
	pfSenderBlock = "127.0.0.52"
	pfClientBlock = "127.0.0.53"
	pfLookupFail  = "127.0.0.54"
	pfHeloBlock   = "127.0.0.55"
)

// postfixWorld is a small internet on loopback whose mail server is a real
// Postfix (with a real postgrey and a policy service in Go), and an engine
// that verifies addresses through it.
type postfixWorld struct {
	pf     *testkit.Postfix
	engine *verify.Engine
}

func newPostfixWorld(t *testing.T) *postfixWorld {
	t.Helper()
	grey := testkit.StartPostgrey(t, testkit.PostgreyOptions{})
	// The policy service answers as the SPF and DNSBL policy daemons of
	// real sites do: about the sender and the client, that is about us.
	policy := testkit.StartPolicy(t, func(req map[string]string) string {
		switch req["recipient"] {
		case "spf@policy.example":
			return "550 5.7.23 SPF validation failed for sender domain"
		case "dnsbl@policy.example":
			return "554 5.7.1 Service unavailable; Client host [" + req["client_address"] + "] blocked using zen.spamhaus.org"
		case "spfreject@policy.example":
			return "REJECT Message rejected due to: SPF fail"
		}
		return "DUNNO"
	})
	// A policy service that is down: nothing listens on this port.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()

	pf := testkit.StartPostfix(t, testkit.PostfixOptions{
		IP:      pfMain,
		Domains: []string{"corp.example", "grey.example", "policy.example", "senderblock.example", "clientblock.example", "lookupfail.example", "heloblock.example"},
		Mailboxes: []string{
			"alice@corp.example", "alice@grey.example", "alice@senderblock.example", "alice@clientblock.example", "alice@heloblock.example",
			"spf@policy.example", "dnsbl@policy.example", "spfreject@policy.example",
		},
		RecipientAccess: map[string]string{
			"plain@corp.example":      "REJECT",
			"gone@corp.example":       "550 5.1.1 Mailbox does not exist",
			"nocode@corp.example":     "550 Sorry, no mailbox here by that name",
			"disabled@corp.example":   "550 5.2.1 Mailbox disabled, not accepting messages",
			"full@corp.example":       "452 4.2.2 Mailbox full",
			"storage@corp.example":    "452 4.3.1 Insufficient system storage",
			"nonet@corp.example":      "550 5.3.2 System not accepting network messages",
			"internal@corp.example":   "451 4.3.0 Internal system error",
			"deadpolicy@corp.example": "deadpolicy",
			"grey.example":            "greylist",
		},
		Policy: policy.Addr,
		Classes: map[string]string{
			"greylist":   grey.Restriction(),
			"deadpolicy": "check_policy_service inet:" + deadAddr,
		},
		Listeners: []testkit.PostfixListener{
			{IP: pfSenderBlock, SenderAccess: map[string]string{"verify@probe.evs.test": "REJECT"}},
			{IP: pfClientBlock, ClientAccess: map[string]string{"127": "REJECT"}},
			// Every lookup in the mailbox table fails, as when its
			// database is down: Postfix's own "Temporary lookup failure".
			{IP: pfLookupFail, Params: map[string]string{"virtual_mailbox_maps": "fail:mailboxes"}},
			// Our HELO name is refused (an inline table, Postfix 3.0+).
			{IP: pfHeloBlock, Params: map[string]string{"smtpd_helo_restrictions": "check_helo_access inline:{ probe.evs.test=REJECT }"}},
		},
		Params: map[string]string{
			// A dead policy service costs one try, not two with a pause.
			"smtpd_policy_service_try_limit": "1",
		},
	})
	t.Logf("postgrey started in %v, postfix in %v (%s)", grey.Startup, pf.Startup, pf.Banner)

	dns := testkit.StartDNS(t)
	for domain, ip := range map[string]string{
		"corp.example": pfMain, "grey.example": pfMain, "policy.example": pfMain,
		"elsewhere.example":   pfMain, // Postfix does not host it: relaying
		"senderblock.example": pfSenderBlock, "clientblock.example": pfClientBlock, "lookupfail.example": pfLookupFail, "heloblock.example": pfHeloBlock,
	} {
		dns.AddRecord(fmt.Sprintf("%s. 300 IN MX 10 mx.%s.", domain, domain))
		dns.AddRecord(fmt.Sprintf("mx.%s. 300 IN A %s", domain, ip))
	}
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{dns.Addr}, Timeout: 500 * time.Millisecond, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: pf.Port, Resolver: res, Egress: loopbackAllowed(t),
		DialTimeout: time.Second, ReplyTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := verify.New(verify.Config{Resolver: res, Prober: verify.SMTP(p), RandomLocal: func() string { return "zz-random-probe" }})
	if err != nil {
		t.Fatal(err)
	}
	return &postfixWorld{pf: pf, engine: engine}
}

// postfixCase is one address, the reply Postfix sends for it (recorded from
// Postfix 3.7.11: these are its words, not ours), and the verdicts a careful
// verifier may give. The verdicts are the specification: a refusal that is
// about us, our sender, relaying or the server's own trouble is never
// evidence against the mailbox, however Postfix words it.
type postfixCase struct {
	email    string
	code     int
	enhanced string
	message  string
	// reasons are the acceptable reasons, the first the preferred one.
	reasons []evs.Reason
	why     string
}

// smtpResultOf is the SMTP result each acceptable reason comes with.
var smtpResultOf = map[evs.Reason]string{
	evs.ReasonAcceptedEmail:   evs.SMTPAccepted,
	evs.ReasonRejectedEmail:   evs.SMTPRejected,
	evs.ReasonMailboxFull:     evs.SMTPFull,
	evs.ReasonGreylisted:      evs.SMTPGreylisted,
	evs.ReasonSMTPUnreachable: evs.SMTPUnreachable,
	evs.ReasonBlocked:         evs.SMTPUnreachable,
	evs.ReasonAmbiguousReply:  evs.SMTPUnreachable,
}

// A temporary failure is greylisted (try later); a permanent refusal that
// is about us is blocked, and one that says nothing of the mailbox is
// ambiguous_reply. All are status unknown, and none is smtp_unreachable:
// the server answered (contract, section 2).
var (
	unknownTemp = []evs.Reason{evs.ReasonGreylisted}
	aboutUs     = []evs.Reason{evs.ReasonBlocked}
	saysNothing = []evs.Reason{evs.ReasonAmbiguousReply}
)

var postfixCases = []postfixCase{
	{"alice@corp.example", 250, "2.1.5", "Ok",
		[]evs.Reason{evs.ReasonAcceptedEmail}, "a real virtual mailbox"},
	{"nobody@corp.example", 550, "5.1.1", "<nobody@corp.example>: Recipient address rejected: User unknown in virtual mailbox table",
		[]evs.Reason{evs.ReasonRejectedEmail}, "an unknown user of a hosted domain"},
	{"plain@corp.example", 554, "5.7.1", "<plain@corp.example>: Recipient address rejected: Access denied",
		saysNothing, "a bare REJECT in an access map says nothing about whether the mailbox exists (sites use it against senders, clients, spam traps)"},
	{"gone@corp.example", 550, "5.1.1", "<gone@corp.example>: Recipient address rejected: Mailbox does not exist",
		[]evs.Reason{evs.ReasonRejectedEmail}, "a coded refusal about the mailbox (5.1.1, and it says so)"},
	// With no enhanced code in the access map, Postfix adds 5.7.1
	// (access_map_reject_code 554 is not used: the map's 550 stands,
	// the DSN is Postfix's default for access maps).
	{"nocode@corp.example", 550, "5.7.1", "<nocode@corp.example>: Recipient address rejected: Sorry, no mailbox here by that name",
		[]evs.Reason{evs.ReasonRejectedEmail}, "a refusal whose words say there is no such mailbox, under the 5.7.1 Postfix adds"},
	{"disabled@corp.example", 550, "5.2.1", "<disabled@corp.example>: Recipient address rejected: Mailbox disabled, not accepting messages",
		[]evs.Reason{evs.ReasonRejectedEmail}, "a disabled mailbox"},
	{"full@corp.example", 452, "4.2.2", "<full@corp.example>: Recipient address rejected: Mailbox full",
		[]evs.Reason{evs.ReasonMailboxFull}, "a full mailbox"},
	{"storage@corp.example", 452, "4.3.1", "<storage@corp.example>: Recipient address rejected: Insufficient system storage",
		unknownTemp, "the server's own disk is full, not the mailbox"},
	{"nonet@corp.example", 550, "5.3.2", "<nonet@corp.example>: Recipient address rejected: System not accepting network messages",
		saysNothing, "the server takes no mail at all: about the system, not the mailbox"},
	{"internal@corp.example", 451, "4.3.0", "<internal@corp.example>: Recipient address rejected: Internal system error",
		unknownTemp, "the server's own trouble"},
	{"x@lookupfail.example", 451, "4.3.0", "<x@lookupfail.example>: Temporary lookup failure",
		unknownTemp, "Postfix could not read its mailbox table"},
	{"deadpolicy@corp.example", 451, "4.3.5", "<deadpolicy@corp.example>: Recipient address rejected: Server configuration problem",
		unknownTemp, "the site's policy service is down"},
	{"anyone@elsewhere.example", 554, "5.7.1", "<anyone@elsewhere.example>: Relay access denied",
		saysNothing, "the server does not host the domain: nothing about the mailbox"},
	{"spf@policy.example", 550, "5.7.23", "<spf@policy.example>: Recipient address rejected: SPF validation failed for sender domain",
		aboutUs, "a policy service refused our sender's SPF: about us"},
	{"dnsbl@policy.example", 554, "5.7.1", "<dnsbl@policy.example>: Recipient address rejected: Service unavailable; Client host [127.0.0.1] blocked using zen.spamhaus.org",
		aboutUs, "a policy service found our IP on a blocklist: about us"},
	// A bare REJECT from a policy service takes Postfix's reject_code, 554.
	{"spfreject@policy.example", 554, "5.7.1", "<spfreject@policy.example>: Recipient address rejected: Message rejected due to: SPF fail",
		aboutUs, "a policy service refused our SPF: about us"},
	{"alice@grey.example", 450, "4.2.0", "<alice@grey.example>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/grey.example.html",
		[]evs.Reason{evs.ReasonGreylisted}, "postgrey greylists the first attempt of a triplet"},
	{"alice@senderblock.example", 554, "5.7.1", "<verify@probe.evs.test>: Sender address rejected: Access denied",
		aboutUs, "our MAIL FROM is refused, shown at RCPT (smtpd_delay_reject)"},
	{"alice@clientblock.example", 554, "5.7.1", "<unknown[127.0.0.1]>: Client host rejected: Access denied",
		aboutUs, "our IP is refused, shown at RCPT (smtpd_delay_reject)"},
	{"alice@heloblock.example", 554, "5.7.1", "<probe.evs.test>: Helo command rejected: Access denied",
		aboutUs, "our HELO name is refused, shown at RCPT (smtpd_delay_reject)"},
}

// TestEngineThroughPostfix verifies addresses through the engine against
// a real Postfix and checks both what Postfix said (code, enhanced code,
// text: the evidence must be Postfix's reply, unchanged) and the verdict.
func TestEngineThroughPostfix(t *testing.T) {
	t.Parallel()
	w := newPostfixWorld(t)
	for _, c := range postfixCases {
		t.Run(c.email, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			d := w.engine.Verify(ctx, verify.Inspect(c.email), evs.ModeFull)
			s := d.Checks.SMTP
			if s.Code != c.code || s.EnhancedCode != c.enhanced || s.Message != c.message {
				t.Errorf("Postfix said %d %s %q, want %d %s %q", s.Code, s.EnhancedCode, s.Message, c.code, c.enhanced, c.message)
			}
			if s.Host != "mx."+c.email[strings.IndexByte(c.email, '@')+1:] {
				t.Errorf("answered by %q", s.Host)
			}
			if !slices.Contains(c.reasons, d.Reason) || s.Result != smtpResultOf[d.Reason] || d.Status() != evs.StatusOf(c.reasons[0]) {
				t.Errorf("verdict %s/%s (smtp %s: %s) for %d %s %q; want %s/%v (%s)",
					d.Status(), d.Reason, s.Result, s.Detail, s.Code, s.EnhancedCode, s.Message, evs.StatusOf(c.reasons[0]), c.reasons, c.why)
			}
		})
	}
	// The accepted mailbox is not mistaken for accept-all: the engine's
	// probe of a random address got Postfix's refusal of unknown users.
	t.Run("accept-all probe", func(t *testing.T) {
		d := w.engine.Verify(context.Background(), verify.Inspect("alice@corp.example"), evs.ModeFull)
		if d.Reason != evs.ReasonAcceptedEmail || d.Checks.SMTP.Detail != "the server rejects unknown addresses" {
			t.Fatalf("%s: %s", d.Reason, d.Checks.SMTP.Detail)
		}
		want := "reject: RCPT from unknown[127.0.0.1]: 550 5.1.1 <zz-random-probe@corp.example>: Recipient address rejected: User unknown in virtual mailbox table"
		// postlogd writes a moment later.
		testkit.EventuallyEvery(t, 3*time.Second, 50*time.Millisecond, testkit.Until(func() bool { return strings.Contains(w.pf.Log(), want) }, "the Postfix log does not show %q", want))
	})
}
