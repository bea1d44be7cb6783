package verify

// Evidence is what the checks found, reduced to what the verdict needs.
type Evidence struct {
	// SyntaxValid is false when the address is not an RFC 5321 mailbox.
	SyntaxValid bool
	// Disposable is true when the domain is on the disposable list.
	Disposable bool
	// DNS is one of the DNS* result constants (DNSNotChecked when the DNS
	// stage did not run).
	DNS string
	// SMTP is one of the SMTP* result constants (SMTPSkipped when no probe
	// ran).
	SMTP string
}

// Verdict is the one place that turns evidence into a reason; the status
// follows from the reason (StatusOf). The first matching row wins:
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
//	7  | SMTP accept-all                  | accept_all          | risky
//	8  | SMTP accepted                    | accepted_email      | deliverable
//	9  | DNS error (SERVFAIL/REFUSED/t-o) | dns_error           | unknown
//	10 | SMTP greylisted (4xx)            | greylisted          | unknown
//	11 | SMTP timeout                     | timeout             | unknown
//	12 | SMTP unreachable or blocked      | smtp_unreachable    | unknown
//	13 | anything else (SMTP skipped)     | mailbox_not_checked | unknown
//
// Why this order: proof that mail cannot arrive (rows 1–4) outranks
// everything, because the server or the DNS said so. A disposable domain is
// risky whatever its server says about the mailbox, except an outright
// rejection. Only then does a positive SMTP answer count. Every failure to
// learn something (rows 9–13) is unknown: never a verdict on the mailbox.
func Verdict(ev Evidence) Reason {
	switch {
	case !ev.SyntaxValid:
		return ReasonInvalidSyntax
	case ev.DNS == DNSNXDomain:
		return ReasonInvalidDomain
	case ev.DNS == DNSNullMX || ev.DNS == DNSNoRecords || ev.DNS == DNSMXNotPublic:
		return ReasonNoMailServer
	case ev.SMTP == SMTPRejected:
		return ReasonRejectedEmail
	case ev.Disposable:
		return ReasonDisposable
	case ev.SMTP == SMTPFull:
		return ReasonMailboxFull
	case ev.SMTP == SMTPAcceptAll:
		return ReasonAcceptAll
	case ev.SMTP == SMTPAccepted:
		return ReasonAcceptedEmail
	case ev.DNS == DNSError:
		return ReasonDNSError
	case ev.SMTP == SMTPGreylisted:
		return ReasonGreylisted
	case ev.SMTP == SMTPTimeout:
		return ReasonTimeout
	case ev.SMTP == SMTPUnreachable:
		return ReasonSMTPUnreachable
	default:
		return ReasonMailboxNotChecked
	}
}
