package verify

import (
	"context"
	"strings"
	"time"
)

// Sandbox is the engine of test-mode accounts (contract, section 8): it runs
// the real syntax, list and suggestion checks but touches no network. The
// local part, or the part after a "+" tag, names the reason to return, with
// "_" or "-" between words ("rejected_email@x", "team+mailbox-full@x").
// Any other address is deliverable/accepted_email unless the real checks
// say otherwise (invalid syntax, disposable domain).
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
func SandboxReason(local string) (Reason, bool) {
	if i := strings.LastIndexByte(local, '+'); i >= 0 {
		local = local[i+1:]
	}
	want := strings.ReplaceAll(strings.ToLower(local), "-", "_")
	for _, r := range Reasons() {
		if string(r) == want {
			return r, true
		}
	}
	return "", false
}

// Verify returns the decision a test-mode account gets for email.
func (s *Sandbox) Verify(_ context.Context, email string, mode Mode) Decision {
	start := s.now()
	in := Inspect(email)
	d := in.decision(email, mode)
	d.TestMode = true
	if !in.Valid {
		d.Checks.SMTP.Detail = "skipped: invalid syntax"
		return s.finish(d, start, Verdict(Evidence{}))
	}
	reason, ok := SandboxReason(in.Address.Local)
	if !ok {
		if in.Flags.Disposable {
			reason = ReasonDisposable
		} else {
			reason = ReasonAcceptedEmail
		}
	}
	mx := "mx.sandbox.invalid"
	d.Checks.DNS = DNSCheck{Result: DNSOK, MX: []string{mx}, Rcode: "NOERROR"}
	smtp := SMTPCheck{Host: mx, TLS: true, Detail: "test mode: no network was used"}
	switch reason {
	case ReasonInvalidSyntax:
		d.Checks.Syntax = SyntaxCheck{Valid: false, Error: "test_mode"}
		d.Normalized = ""
		d.Checks.DNS = DNSCheck{Result: DNSNotChecked, MX: []string{}}
		smtp = SMTPCheck{Result: SMTPSkipped, Detail: "test mode: skipped: invalid syntax"}
	case ReasonInvalidDomain:
		d.Checks.DNS = DNSCheck{Result: DNSNXDomain, MX: []string{}, Rcode: "NXDOMAIN"}
		smtp = SMTPCheck{Result: SMTPSkipped, Detail: "test mode: skipped: no mail server to probe"}
	case ReasonNoMailServer:
		d.Checks.DNS = DNSCheck{Result: DNSNullMX, MX: []string{}, Rcode: "NOERROR"}
		smtp = SMTPCheck{Result: SMTPSkipped, Detail: "test mode: skipped: no mail server to probe"}
	case ReasonDNSError:
		d.Checks.DNS = DNSCheck{Result: DNSError, MX: []string{}, Rcode: "SERVFAIL", Error: "servfail"}
		smtp = SMTPCheck{Result: SMTPSkipped, Detail: "test mode: skipped: no mail server to probe"}
	case ReasonAcceptedEmail:
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = SMTPAccepted, 250, "2.1.5", "OK (test mode)"
	case ReasonRejectedEmail:
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = SMTPRejected, 550, "5.1.1", "No such user (test mode)"
	case ReasonAcceptAll:
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = SMTPAcceptAll, 250, "2.1.5", "OK (test mode)"
	case ReasonMailboxFull:
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = SMTPFull, 552, "5.2.2", "Mailbox full (test mode)"
	case ReasonGreylisted:
		smtp.Result, smtp.Code, smtp.EnhancedCode, smtp.Message = SMTPGreylisted, 451, "4.7.1", "Greylisted, try again later (test mode)"
	case ReasonSMTPUnreachable:
		smtp = SMTPCheck{Result: SMTPUnreachable, Host: mx, Detail: "test mode: no mail host accepted a connection"}
	case ReasonTimeout:
		smtp = SMTPCheck{Result: SMTPTimeout, Host: mx, Detail: "test mode: no mail host answered in time"}
	case ReasonMailboxNotChecked, ReasonDisposable:
		smtp = SMTPCheck{Result: SMTPSkipped, Detail: "test mode: mailbox not checked"}
		if reason == ReasonDisposable {
			d.Flags.Disposable = true
		}
	}
	if mode == ModeQuick && smtp.Result != SMTPSkipped {
		// The contract asks test mode to reach every reason in both modes,
		// so quick mode keeps the named outcome and says it is simulated.
		smtp.Detail = "test mode: simulated probe result (quick mode never probes)"
	}
	d.Checks.SMTP = smtp
	d.Flags.AcceptAll = smtp.Result == SMTPAcceptAll
	return s.finish(d, start, reason)
}

func (s *Sandbox) finish(d Decision, start time.Time, reason Reason) Decision {
	d.Reason = reason
	now := s.now()
	d.CheckedAt = Time{now.UTC()}
	d.DurationMs = now.Sub(start).Milliseconds()
	return d
}

// VerifyDomain verifies several addresses, like Engine.VerifyDomain, so
// batches of test-mode accounts run the same code path.
func (s *Sandbox) VerifyDomain(ctx context.Context, emails []string, mode Mode, _ *CatchAllMemo) []Decision {
	out := make([]Decision, len(emails))
	for i, e := range emails {
		out[i] = s.Verify(ctx, e, mode)
	}
	return out
}
