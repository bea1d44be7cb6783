package verify_test

import (
	"testing"

	"github.com/evs-dev/evs/internal/verify"
)

// TestVerdictPrecedence walks the precedence table of Verdict row by row:
// each row's evidence also carries the evidence of every lower row, so a
// row only passes if it really outranks them.
func TestVerdictPrecedence(t *testing.T) {
	ok := verify.DNSOK
	tests := []struct {
		name string
		ev   verify.Evidence
		want verify.Reason
	}{
		{"1 syntax beats all", verify.Evidence{SyntaxValid: false, Disposable: true, DNS: verify.DNSNXDomain, SMTP: verify.SMTPAccepted}, verify.ReasonInvalidSyntax},
		{"2 nxdomain", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: verify.DNSNXDomain, SMTP: verify.SMTPSkipped}, verify.ReasonInvalidDomain},
		{"3 null mx", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: verify.DNSNullMX, SMTP: verify.SMTPSkipped}, verify.ReasonNoMailServer},
		{"3 no records", verify.Evidence{SyntaxValid: true, DNS: verify.DNSNoRecords, SMTP: verify.SMTPSkipped}, verify.ReasonNoMailServer},
		{"3 mx not public beats disposable", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: verify.DNSMXNotPublic, SMTP: verify.SMTPSkipped}, verify.ReasonNoMailServer},
		{"4 rejected beats disposable", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: ok, SMTP: verify.SMTPRejected}, verify.ReasonRejectedEmail},
		{"5 disposable beats accepted", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: ok, SMTP: verify.SMTPAccepted}, verify.ReasonDisposable},
		{"5 disposable beats full", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: ok, SMTP: verify.SMTPFull}, verify.ReasonDisposable},
		{"5 disposable beats dns error", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: verify.DNSError, SMTP: verify.SMTPSkipped}, verify.ReasonDisposable},
		{"5 disposable in quick mode", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: ok, SMTP: verify.SMTPSkipped}, verify.ReasonDisposable},
		{"6 full", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: verify.SMTPFull}, verify.ReasonMailboxFull},
		{"7 accept all", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: verify.SMTPAcceptAll}, verify.ReasonAcceptAll},
		{"8 accepted", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: verify.SMTPAccepted}, verify.ReasonAcceptedEmail},
		{"9 dns error", verify.Evidence{SyntaxValid: true, DNS: verify.DNSError, SMTP: verify.SMTPSkipped}, verify.ReasonDNSError},
		{"10 greylisted", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: verify.SMTPGreylisted}, verify.ReasonGreylisted},
		{"11 timeout", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: verify.SMTPTimeout}, verify.ReasonTimeout},
		{"12 unreachable", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: verify.SMTPUnreachable}, verify.ReasonSMTPUnreachable},
		{"13 skipped", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: verify.SMTPSkipped}, verify.ReasonMailboxNotChecked},
		{"13 nothing known", verify.Evidence{SyntaxValid: true, DNS: verify.DNSNotChecked}, verify.ReasonMailboxNotChecked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := verify.Verdict(tt.ev); got != tt.want {
				t.Errorf("Verdict(%+v) = %s, want %s", tt.ev, got, tt.want)
			}
		})
	}
}

func TestEveryReasonHasOneStatus(t *testing.T) {
	want := map[verify.Reason]verify.Status{
		"accepted_email": "deliverable",
		"invalid_syntax": "undeliverable", "invalid_domain": "undeliverable", "no_mail_server": "undeliverable", "rejected_email": "undeliverable",
		"accept_all": "risky", "mailbox_full": "risky", "disposable": "risky",
		"greylisted": "unknown", "smtp_unreachable": "unknown", "dns_error": "unknown", "timeout": "unknown", "mailbox_not_checked": "unknown",
	}
	if len(verify.Reasons()) != len(want) {
		t.Fatalf("Reasons() has %d codes, the contract %d", len(verify.Reasons()), len(want))
	}
	for _, r := range verify.Reasons() {
		if got := verify.StatusOf(r); got != want[r] {
			t.Errorf("StatusOf(%s) = %s, want %s", r, got, want[r])
		}
	}
}
