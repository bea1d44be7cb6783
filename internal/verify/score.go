package verify

import (
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// decision.score is 0–100, how likely mail to the address is delivered
// and not bounced: a pure function of fields every stored decision keeps,
// recomputed on read. These constants are docs/score.md's table, with the
// reasoning for each factor.
const (
	// scoreAcceptedProven: the mailbox was accepted and a random address on
	// the same domain was rejected, so the server checks recipients.
	scoreAcceptedProven = 97
	// scoreAcceptedUnproven: accepted, but the random-address probe was
	// inconclusive (greylisted, timed out) or is not on record.
	scoreAcceptedUnproven = 90
	// scoreDeliveredOnRecord: an accept-all domain's address the account
	// reported a delivery to, with no hard bounce since (ApplyHistory):
	// mail arrived, but an accept-all server may still bounce later.
	scoreDeliveredOnRecord = 95

	// scoreAcceptAllUnproven: the mailbox was accepted, and the
	// random-address probe was inconclusive: nothing says the domain
	// accepts all, nothing that it checks recipients.
	scoreAcceptAllUnproven = 65
	// scoreAcceptAllCatchAll: the server also accepted a random address.
	scoreAcceptAllCatchAll = 60
	// scoreAcceptAllGateway: a security gateway accepted, and its probe did not
	// show recipient verification; the store behind it may bounce.
	scoreAcceptAllGateway = 55
	// scoreAcceptAllBounceLater: a provider that accepts at RCPT and bounces
	// unknown users after the message (Yahoo/AOL).
	scoreAcceptAllBounceLater = 45

	scoreGreylisted      = 45
	scoreTimeout         = 35
	scoreSMTPUnreachable = 30
	// A server answered: the domain receives mail. What it said was
	// about us (blocked) or about nothing we can read (ambiguous).
	scoreBlocked     = 40
	scoreAmbiguous   = 40
	scoreMailboxFull = 25
	scoreDNSError    = 20
	scoreDisposable  = 15

	// scoreNotCheckedBase is a mailbox not asked (quick mode, SMTP off) whose
	// domain only has an implicit MX (an A/AAAA record); scoreNotCheckedMX is
	// added when the domain publishes MX records, scoreNotCheckedProvider when
	// the MX belongs to a known mail service.
	scoreNotCheckedBase     = 35
	scoreNotCheckedMX       = 20
	scoreNotCheckedProvider = 5

	scoreRejectedEmail = 2
	// scoreKnownBounce: the account's own mail to it bounced hard, with no
	// delivery since (ApplyHistory).
	scoreKnownBounce   = 1
	scoreNoMailServer  = 1
	scoreInvalidDomain = 1
	scoreInvalidSyntax = 0

	// scoreRolePenalty is taken off every score but an undeliverable one for a
	// role mailbox (info@, admin@...).
	scoreRolePenalty = 10

	// domainPriorWeight is how many outcomes the evidence's own score
	// weighs as, against the domain's learned counts (scoreLearned): with
	// 10 reported outcomes the counts and the probe's answer weigh the
	// same, and a handful of outcomes only nudges the score.
	domainPriorWeight = 10
)

// ScoreBands are the score ranges of each status: every deliverable address
// scores above every risky or unknown one, which score above every
// undeliverable one. Risky and unknown share a band: "risky" says what we
// learned is doubtful, "unknown" that we learned nothing, and either may be
// the likelier to arrive (a greylisting server is a better bet than a full
// mailbox).
var ScoreBands = map[evs.Status][2]int{
	evs.Deliverable:   {80, 100},
	evs.Risky:         {5, 70},
	evs.Unknown:       {5, 70},
	evs.Undeliverable: {0, 4},
}

// Score returns decision.score for d (0–100), from its reason, flags,
// provider and SMTP and DNS evidence, by the table of docs/score.md, and
// nothing else (not the time, not the mode, not test mode).
func Score(d evs.Decision) int {
	s := scoreBase(d)
	status := evs.StatusOf(d.Reason)
	if status == evs.Undeliverable {
		// Mail cannot arrive: no flag makes it likelier or less likely.
		return s
	}
	if dh := d.Checks.DomainHistory; dh != nil && UsesDomainCounts(d) {
		s = scoreLearned(s, dh.DomainCounts, ScoreBands[status])
	}
	if d.Flags.Role {
		// Never below the band's floor: a role address the domain's
		// outcomes already scored at the bottom is still not undeliverable.
		s = max(s-scoreRolePenalty, ScoreBands[status][0])
	}
	return s
}

// scoreLearned is the score of base's evidence once the domain's counts
// are known: the Beta-smoothed delivery rate
//
//	(domainPriorWeight × base/100 + delivered) / (domainPriorWeight + delivered + hardBounces)
//
// as a percentage, rounded, and kept in band, so the status still says
// what the server answered. The evidence's own score is the prior.
func scoreLearned(base int, c evs.DomainCounts, band [2]int) int {
	dl, hb := max(c.Delivered, 0), max(c.HardBounces, 0)
	p := (domainPriorWeight*float64(base)/100 + float64(dl)) / float64(domainPriorWeight+dl+hb)
	s := int(p*100 + 0.5)
	return min(max(s, band[0]), band[1])
}

func scoreBase(d evs.Decision) int {
	smtp := d.Checks.SMTP
	switch d.Reason {
	case evs.ReasonAcceptedEmail:
		if h := d.Checks.History; h != nil && h.Result == evs.HistoryDelivered {
			return scoreDeliveredOnRecord
		}
		if smtp.CatchAll == evs.SMTPRejected {
			return scoreAcceptedProven
		}
		return scoreAcceptedUnproven
	case evs.ReasonAcceptAll:
		info := smtpprobe.Provider(smtp.Provider).Info()
		switch {
		case smtp.Result == evs.SMTPAccepted:
			return scoreAcceptAllUnproven
		case info != nil && info.AcceptThenBounce:
			return scoreAcceptAllBounceLater
		case info != nil && info.Gateway && smtp.CatchAll != evs.SMTPAccepted:
			return scoreAcceptAllGateway
		}
		return scoreAcceptAllCatchAll
	case evs.ReasonMailboxNotChecked:
		s := scoreNotCheckedBase
		dns := d.Checks.DNS
		if dns.Result == evs.DNSOK && !dns.ImplicitMX && len(dns.MX) > 0 {
			s += scoreNotCheckedMX
		}
		if p := smtpprobe.Provider(smtp.Provider); p != "" && p != smtpprobe.ProviderOther {
			s += scoreNotCheckedProvider
		}
		return s
	}
	return reasonScores[d.Reason] // scoreInvalidSyntax (0) for invalid_syntax and unknown reasons
}

// reasonScores are the scores of the reasons whose evidence does not
// change them.
var reasonScores = map[evs.Reason]int{
	evs.ReasonMailboxFull:     scoreMailboxFull,
	evs.ReasonDisposable:      scoreDisposable,
	evs.ReasonGreylisted:      scoreGreylisted,
	evs.ReasonTimeout:         scoreTimeout,
	evs.ReasonSMTPUnreachable: scoreSMTPUnreachable,
	evs.ReasonBlocked:         scoreBlocked,
	evs.ReasonAmbiguousReply:  scoreAmbiguous,
	evs.ReasonDNSError:        scoreDNSError,
	evs.ReasonRejectedEmail:   scoreRejectedEmail,
	evs.ReasonKnownBounce:     scoreKnownBounce,
	evs.ReasonNoMailServer:    scoreNoMailServer,
	evs.ReasonInvalidDomain:   scoreInvalidDomain,
	evs.ReasonInvalidSyntax:   scoreInvalidSyntax,
}
