package verify

import "github.com/evs-dev/evs/internal/evs"

// Evidence is what the checks found, reduced to what the verdict needs.
type Evidence struct {
	SyntaxValid bool   // an RFC 5321 mailbox
	Disposable  bool   // the domain is on the disposable list
	DNS         string // a DNS* result constant (evs.DNSNotChecked when not run)
	SMTP        string // an SMTP* result constant (evs.SMTPSkipped when no probe ran)
	// SMTPReplied: a mail server answered the probe; SMTPBlocked: its
	// refusal was about us, not the mailbox (Blocked).
	SMTPReplied, SMTPBlocked bool
	// AcceptAllUnknown: the mailbox was accepted but the random-address
	// probe was inconclusive.
	AcceptAllUnknown bool
}

// Verdict is the one place that turns evidence into a reason; the status
// follows from the reason (evs.StatusOf). The first matching row wins:
//
//	#  | evidence                         | reason              | status
//	---+----------------------------------+---------------------+--------------
//	1  | syntax invalid                   | invalid_syntax      | undeliverable
//	2  | DNS nxdomain                     | invalid_domain      | undeliverable
//	3  | DNS null MX, no MX/A/AAAA, or    | no_mail_server      | undeliverable
//	   | MX addresses all non-public      |                     |
//	4  | SMTP rejected (5xx at RCPT)      | rejected_email      | undeliverable
//	5  | disposable domain                | disposable          | risky
//	6  | SMTP mailbox full                | mailbox_full        | risky
//	7  | SMTP accept-all, or accepted     | accept_all          | risky
//	   | with the accept-all probe        |                     |
//	   | inconclusive                     |                     |
//	8  | SMTP accepted                    | accepted_email      | deliverable
//	9  | DNS error (SERVFAIL/REFUSED/t-o) | dns_error           | unknown
//	10 | SMTP greylisted (4xx)            | greylisted          | unknown
//	11 | SMTP timeout                     | timeout             | unknown
//	12 | SMTP refused about us            | blocked             | unknown
//	13 | SMTP reply that says nothing     | ambiguous_reply     | unknown
//	   | about the mailbox                |                     |
//	14 | SMTP unreachable (no reply)      | smtp_unreachable    | unknown
//	15 | anything else (SMTP skipped)     | mailbox_not_checked | unknown
//
// known_bounce is not in this table: it comes from what the account
// reported about its mail, not from the checks, and ApplyHistory
// (history.go) sets it on the decision this table made.
//
// Why this order: proof that mail cannot arrive (rows 1–4) outranks
// everything, because the server or the DNS said so. A disposable domain is
// risky whatever its server says about the mailbox, except an outright
// rejection. Only then does a positive SMTP answer count, and it is
// deliverable only when the server also showed that it rejects unknown
// addresses (contract, section 2): with the probe inconclusive, mail may
// arrive but the 250 is not proof, which is risky. Every failure to
// learn something (rows 9–15) is unknown: never a verdict on the mailbox;
// its reason says what happened, and smtp_unreachable only when no server
// answered at all (contract, section 2).
func Verdict(ev Evidence) evs.Reason {
	switch {
	case !ev.SyntaxValid:
		return evs.ReasonInvalidSyntax
	case ev.DNS == evs.DNSNXDomain:
		return evs.ReasonInvalidDomain
	case ev.DNS == evs.DNSNullMX || ev.DNS == evs.DNSNoRecords || ev.DNS == evs.DNSMXNotPublic:
		return evs.ReasonNoMailServer
	case ev.SMTP == evs.SMTPRejected:
		return evs.ReasonRejectedEmail
	case ev.Disposable:
		return evs.ReasonDisposable
	case ev.SMTP == evs.SMTPFull:
		return evs.ReasonMailboxFull
	case ev.SMTP == evs.SMTPAcceptAll, ev.SMTP == evs.SMTPAccepted && ev.AcceptAllUnknown:
		return evs.ReasonAcceptAll
	case ev.SMTP == evs.SMTPAccepted:
		return evs.ReasonAcceptedEmail
	case ev.DNS == evs.DNSError:
		return evs.ReasonDNSError
	case ev.SMTP == evs.SMTPGreylisted:
		return evs.ReasonGreylisted
	case ev.SMTP == evs.SMTPTimeout:
		return evs.ReasonTimeout
	case ev.SMTP == evs.SMTPUnreachable && ev.SMTPBlocked:
		return evs.ReasonBlocked
	case ev.SMTP == evs.SMTPUnreachable && ev.SMTPReplied:
		return evs.ReasonAmbiguousReply
	case ev.SMTP == evs.SMTPUnreachable:
		return evs.ReasonSMTPUnreachable
	default:
		return evs.ReasonMailboxNotChecked
	}
}
