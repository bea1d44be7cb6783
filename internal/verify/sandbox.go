package verify

import (
	"context"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// Sandbox is the engine of test-mode accounts: the real syntax, list and
// suggestion checks, no network. The local part, or the part after a "+"
// tag, names the reason to return ("rejected_email@x",
// "team+mailbox-full@x"). Any other address gets what a live check would
// give in its mode, unless the real checks say otherwise:
// deliverable/accepted_email in full mode, unknown/mailbox_not_checked in
// quick mode.
type Sandbox struct {
	now func() time.Time
}

// NewSandbox returns a sandbox engine; now defaults to time.Now.
func NewSandbox(now func() time.Time) *Sandbox {
	if now == nil {
		now = time.Now
	}
	return &Sandbox{now: now}
}

// SandboxReason returns the reason a test-mode local part asks for.
func SandboxReason(local string) (evs.Reason, bool) {
	if i := strings.LastIndexByte(local, '+'); i >= 0 {
		local = local[i+1:]
	}
	want := strings.ReplaceAll(strings.ToLower(local), "-", "_")
	for _, r := range evs.Reasons() {
		if string(r) == want {
			return r, true
		}
	}
	return "", false
}

// Verify returns the decision a test-mode account gets for an inspected
// address (Inspect).
func (s *Sandbox) Verify(_ context.Context, in Inspection, mode evs.Mode) evs.Decision {
	start := s.now()
	d := in.decision(mode)
	d.TestMode = true
	if !in.Valid {
		d.Checks.SMTP.Detail = "skipped: invalid syntax"
		return s.finish(d, start, Verdict(Evidence{}))
	}
	reason, ok := SandboxReason(in.Address.Local)
	switch {
	case ok:
	case in.Flags.Disposable:
		reason = evs.ReasonDisposable
	case mode == evs.ModeQuick:
		reason = evs.ReasonMailboxNotChecked
	default:
		reason = evs.ReasonAcceptedEmail
	}
	mx := "mx.sandbox.invalid"
	d.Checks.DNS = evs.DNSCheck{Result: evs.DNSOK, MX: []string{mx}, Rcode: "NOERROR"}
	// The sandbox's MX is no provider's: "other", as a live check of
	// an unknown MX host says.
	const provider = "other"
	smtp := evs.SMTPCheck{Host: mx, Provider: provider, TLS: true, Detail: "test mode: no network was used"}
	switch reason {
	case evs.ReasonInvalidSyntax:
		d.Checks.Syntax = evs.SyntaxCheck{Valid: false, Error: "test_mode"}
		d.Normalized = ""
		d.Checks.DNS = evs.DNSCheck{Result: evs.DNSNotChecked, MX: []string{}}
		smtp = evs.SMTPCheck{Result: evs.SMTPSkipped, Detail: "test mode: skipped: invalid syntax"}
	case evs.ReasonInvalidDomain:
		d.Checks.DNS = evs.DNSCheck{Result: evs.DNSNXDomain, MX: []string{}, Rcode: "NXDOMAIN"}
		smtp = evs.SMTPCheck{Result: evs.SMTPSkipped, Detail: "test mode: skipped: no mail server to probe"}
	case evs.ReasonNoMailServer:
		d.Checks.DNS = evs.DNSCheck{Result: evs.DNSNullMX, MX: []string{}, Rcode: "NOERROR"}
		smtp = evs.SMTPCheck{Result: evs.SMTPSkipped, Detail: "test mode: skipped: no mail server to probe"}
	case evs.ReasonDNSError:
		d.Checks.DNS = evs.DNSCheck{Result: evs.DNSError, MX: []string{}, Rcode: "SERVFAIL", Error: "servfail"}
		smtp = evs.SMTPCheck{Result: evs.SMTPSkipped, Detail: "test mode: skipped: no mail server to probe"}
	case evs.ReasonAcceptedEmail:
		// The simulated server rejects unknown addresses: the accepted
		// mailbox is proof, as a live check's is when the random-address
		// probe is rejected.
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = evs.SMTPAccepted, 250, "2.1.5", "OK (test mode)"
		smtp.CatchAll = evs.SMTPRejected
	case evs.ReasonRejectedEmail:
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = evs.SMTPRejected, 550, "5.1.1", "No such user (test mode)"
	case evs.ReasonKnownBounce:
		// An accept-all server, and a hard bounce reported a day before
		// the check: what ApplyHistory makes of a real one.
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = evs.SMTPAcceptAll, 250, "2.1.5", "OK (test mode)"
		smtp.CatchAll = evs.SMTPAccepted
		d.Checks.History = &evs.HistoryCheck{
			Result: evs.HistoryKnownBounce, Outcome: evs.OutcomeBounced, BounceType: evs.BounceHard,
			At: evs.Time{Time: start.Add(-24 * time.Hour).UTC().Truncate(time.Millisecond)}, SMTPReply: "550 5.1.1 No such user (test mode)",
			Detail: "test mode: a simulated hard bounce",
		}
	case evs.ReasonAcceptAll:
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = evs.SMTPAcceptAll, 250, "2.1.5", "OK (test mode)"
		smtp.CatchAll = evs.SMTPAccepted
	case evs.ReasonMailboxFull:
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = evs.SMTPFull, 552, "5.2.2", "Mailbox full (test mode)"
	case evs.ReasonGreylisted:
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = evs.SMTPGreylisted, 451, "4.7.1", "Greylisted, try again later (test mode)"
	case evs.ReasonSMTPUnreachable:
		smtp = evs.SMTPCheck{Result: evs.SMTPUnreachable, Host: mx, Provider: provider, Detail: "test mode: no mail host accepted a connection"}
	case evs.ReasonBlocked:
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = evs.SMTPUnreachable, 554, "5.7.1", "Client host blocked using a blocklist (test mode)"
		smtp.Detail = detailBlocked + "test mode: the server refused our probe (about us, not the mailbox)"
	case evs.ReasonAmbiguousReply:
		smtp.Result, smtp.Code, smtp.Message = evs.SMTPUnreachable, 550, "Requested action not taken (test mode)"
		smtp.Detail = "test mode: the reply says nothing certain about the mailbox"
	case evs.ReasonTimeout:
		smtp = evs.SMTPCheck{Result: evs.SMTPTimeout, Host: mx, Provider: provider, Detail: "test mode: no mail host answered in time"}
	case evs.ReasonMailboxNotChecked, evs.ReasonDisposable:
		smtp = evs.SMTPCheck{Result: evs.SMTPSkipped, Provider: provider, Detail: "test mode: mailbox not checked"}
		if reason == evs.ReasonDisposable {
			d.Flags.Disposable = true
		}
		if !ok && mode == evs.ModeQuick {
			smtp.Detail = "skipped: quick mode" // what a live quick check says
		}
	}
	if mode == evs.ModeQuick && smtp.Result != evs.SMTPSkipped {
		// The contract asks test mode to reach every reason in both modes,
		// so quick mode keeps the named outcome and says it is simulated.
		smtp.Detail = "test mode: simulated probe result (quick mode never probes)"
	}
	d.Checks.SMTP = smtp
	d.Flags.AcceptAll = smtp.Result == evs.SMTPAcceptAll
	d.Flags.AcceptAllUnknown = smtp.AcceptAllUnknown()
	return s.finish(d, start, reason)
}

func (s *Sandbox) finish(d evs.Decision, start time.Time, reason evs.Reason) evs.Decision {
	d.Reason = reason
	d.Score = Score(d)
	now := s.now()
	d.CheckedAt = evs.Time{Time: now.UTC()}
	d.DurationMs = now.Sub(start).Milliseconds()
	return d
}

// VerifyDomain verifies several addresses, like Engine.VerifyDomain, so
// batches of test-mode accounts run the same code path.
func (s *Sandbox) VerifyDomain(ctx context.Context, emails []string, mode evs.Mode) []evs.Decision {
	out := make([]evs.Decision, len(emails))
	for i, e := range emails {
		out[i] = s.Verify(ctx, Inspect(e), mode)
	}
	return out
}
