// Package score turns a decision's evidence into decision.score (contract,
// section 2): 0–100, how likely mail to the address is delivered and not
// bounced. It is a pure function of fields every stored decision keeps, so
// a store can recompute it on read and the same evidence always gives the
// same score. docs/score.md is the table with the reasoning for each
// factor; the constants below are that table.
package score

import (
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// The table of docs/score.md: the base score of each reason, by the
// evidence that led to it.
const (
	// AcceptedProven: the mailbox was accepted and a random address on the
	// same domain was rejected, so the server checks recipients.
	AcceptedProven = 97
	// AcceptedUnproven: accepted, but the random-address probe was
	// inconclusive (greylisted, timed out) or is not on record.
	AcceptedUnproven = 90

	// AcceptAllCatchAll: the server also accepted a random address.
	AcceptAllCatchAll = 60
	// AcceptAllGateway: a security gateway accepted, and its probe did not
	// show recipient verification; the store behind it may bounce.
	AcceptAllGateway = 55
	// AcceptAllBounceLater: a provider that accepts at RCPT and bounces
	// unknown users after the message (Yahoo/AOL).
	AcceptAllBounceLater = 45

	Greylisted      = 45
	Timeout         = 35
	SMTPUnreachable = 30
	MailboxFull     = 25
	DNSError        = 20
	Disposable      = 15

	// NotCheckedBase is a mailbox not asked (quick mode, SMTP off) whose
	// domain only has an implicit MX (an A/AAAA record); NotCheckedMX is
	// added when the domain publishes MX records, NotCheckedProvider when
	// the MX belongs to a known mail service.
	NotCheckedBase     = 35
	NotCheckedMX       = 20
	NotCheckedProvider = 5

	RejectedEmail = 2
	NoMailServer  = 1
	InvalidDomain = 1
	InvalidSyntax = 0

	// RolePenalty is taken off every score but an undeliverable one for a
	// role mailbox (info@, admin@...).
	RolePenalty = 10
)

// Bands are the score ranges of each status: every deliverable address
// scores above every risky or unknown one, which score above every
// undeliverable one. Risky and unknown share a band: "risky" says what we
// learned is doubtful, "unknown" that we learned nothing, and either may be
// the likelier to arrive (a greylisting server is a better bet than a full
// mailbox).
var Bands = map[evs.Status][2]int{
	evs.Deliverable:   {80, 100},
	evs.Risky:         {5, 70},
	evs.Unknown:       {5, 70},
	evs.Undeliverable: {0, 4},
}

// Of returns the score of d, from its reason, flags, provider and SMTP and
// DNS evidence. Nothing else is read: not the time, not the mode, not
// whether it came from test mode (the sandbox's evidence is scored like a
// live check's).
func Of(d evs.Decision) int {
	s := base(d)
	if evs.StatusOf(d.Reason) == evs.Undeliverable {
		// Mail cannot arrive: no flag makes it likelier or less likely.
		return s
	}
	if d.Flags.Role {
		s = max(s-RolePenalty, 0)
	}
	return s
}

func base(d evs.Decision) int {
	smtp := d.Checks.SMTP
	switch d.Reason {
	case evs.ReasonAcceptedEmail:
		if smtp.CatchAll == evs.SMTPRejected {
			return AcceptedProven
		}
		return AcceptedUnproven
	case evs.ReasonAcceptAll:
		info := smtpprobe.Provider(smtp.Provider).Info()
		switch {
		case info != nil && info.AcceptThenBounce:
			return AcceptAllBounceLater
		case info != nil && info.Gateway && smtp.CatchAll != evs.SMTPAccepted:
			return AcceptAllGateway
		}
		return AcceptAllCatchAll
	case evs.ReasonMailboxFull:
		return MailboxFull
	case evs.ReasonDisposable:
		return Disposable
	case evs.ReasonGreylisted:
		return Greylisted
	case evs.ReasonTimeout:
		return Timeout
	case evs.ReasonSMTPUnreachable:
		return SMTPUnreachable
	case evs.ReasonDNSError:
		return DNSError
	case evs.ReasonMailboxNotChecked:
		s := NotCheckedBase
		dns := d.Checks.DNS
		if dns.Result == evs.DNSOK && !dns.ImplicitMX && len(dns.MX) > 0 {
			s += NotCheckedMX
		}
		if p := smtpprobe.Provider(smtp.Provider); p != "" && p != smtpprobe.ProviderOther {
			s += NotCheckedProvider
		}
		return s
	case evs.ReasonRejectedEmail:
		return RejectedEmail
	case evs.ReasonNoMailServer:
		return NoMailServer
	case evs.ReasonInvalidDomain:
		return InvalidDomain
	default: // invalid_syntax, and any reason not of the contract
		return InvalidSyntax
	}
}
