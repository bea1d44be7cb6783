package verify_test

import (
	"testing"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// TestVerdictPrecedence walks the precedence table of Verdict row by row:
// each row's evidence also carries the evidence of every lower row, so a
// row only passes if it really outranks them.
func TestVerdictPrecedence(t *testing.T) {
	t.Parallel()
	ok := evs.DNSOK
	tests := []struct {
		name string
		ev   verify.Evidence
		want evs.Reason
	}{
		{"1 syntax beats all", verify.Evidence{SyntaxValid: false, Disposable: true, DNS: evs.DNSNXDomain, SMTP: evs.SMTPAccepted}, evs.ReasonInvalidSyntax},
		{"2 nxdomain", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: evs.DNSNXDomain, SMTP: evs.SMTPSkipped}, evs.ReasonInvalidDomain},
		{"3 null mx", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: evs.DNSNullMX, SMTP: evs.SMTPSkipped}, evs.ReasonNoMailServer},
		{"3 no records", verify.Evidence{SyntaxValid: true, DNS: evs.DNSNoRecords, SMTP: evs.SMTPSkipped}, evs.ReasonNoMailServer},
		{"3 mx not public beats disposable", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: evs.DNSMXNotPublic, SMTP: evs.SMTPSkipped}, evs.ReasonNoMailServer},
		{"4 rejected beats disposable", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: ok, SMTP: evs.SMTPRejected}, evs.ReasonRejectedEmail},
		{"5 disposable beats accepted", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: ok, SMTP: evs.SMTPAccepted}, evs.ReasonDisposable},
		{"5 disposable beats full", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: ok, SMTP: evs.SMTPFull}, evs.ReasonDisposable},
		{"5 disposable beats dns error", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: evs.DNSError, SMTP: evs.SMTPSkipped}, evs.ReasonDisposable},
		{"5 disposable in quick mode", verify.Evidence{SyntaxValid: true, Disposable: true, DNS: ok, SMTP: evs.SMTPSkipped}, evs.ReasonDisposable},
		{"6 full", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: evs.SMTPFull}, evs.ReasonMailboxFull},
		{"7 accept all", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: evs.SMTPAcceptAll}, evs.ReasonAcceptAll},
		{"8 accepted", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: evs.SMTPAccepted}, evs.ReasonAcceptedEmail},
		{"9 dns error", verify.Evidence{SyntaxValid: true, DNS: evs.DNSError, SMTP: evs.SMTPSkipped}, evs.ReasonDNSError},
		{"10 greylisted", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: evs.SMTPGreylisted}, evs.ReasonGreylisted},
		{"11 timeout", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: evs.SMTPTimeout}, evs.ReasonTimeout},
		{"12 refused about us", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: evs.SMTPUnreachable, SMTPReplied: true, SMTPBlocked: true}, evs.ReasonBlocked},
		{"13 a reply that says nothing", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: evs.SMTPUnreachable, SMTPReplied: true}, evs.ReasonAmbiguousReply},
		{"14 unreachable: no reply", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: evs.SMTPUnreachable}, evs.ReasonSMTPUnreachable},
		{"15 skipped", verify.Evidence{SyntaxValid: true, DNS: ok, SMTP: evs.SMTPSkipped}, evs.ReasonMailboxNotChecked},
		{"15 nothing known", verify.Evidence{SyntaxValid: true, DNS: evs.DNSNotChecked}, evs.ReasonMailboxNotChecked},
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
	t.Parallel()
	want := map[evs.Reason]evs.Status{
		"accepted_email": "deliverable",
		"invalid_syntax": "undeliverable", "invalid_domain": "undeliverable", "no_mail_server": "undeliverable", "rejected_email": "undeliverable",
		"known_bounce": "undeliverable",
		"accept_all":   "risky", "mailbox_full": "risky", "disposable": "risky",
		"greylisted": "unknown", "smtp_unreachable": "unknown", "blocked": "unknown", "ambiguous_reply": "unknown",
		"dns_error": "unknown", "timeout": "unknown", "mailbox_not_checked": "unknown",
	}
	if len(evs.Reasons()) != len(want) {
		t.Fatalf("Reasons() has %d codes, the contract %d", len(evs.Reasons()), len(want))
	}
	for _, r := range evs.Reasons() {
		if got := evs.StatusOf(r); got != want[r] {
			t.Errorf("StatusOf(%s) = %s, want %s", r, got, want[r])
		}
	}
}
