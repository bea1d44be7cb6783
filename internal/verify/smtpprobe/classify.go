package smtpprobe

import (
	"regexp"
	"strings"
)

// Class is what one SMTP reply says about the mailbox (or about us).
type Class string

// The classes a reply can fall in. Only Accepted, Rejected and Full are
// statements about the mailbox; the others say the probe could not tell.
const (
	// Accepted is a 2xx reply (at RCPT: the server takes mail for the mailbox).
	Accepted Class = "accepted"
	// Rejected is a permanent "this mailbox does not exist or is disabled".
	Rejected Class = "rejected"
	// Full is an over-quota mailbox (RFC 3463 X.2.2).
	Full Class = "full"
	// Greylisted is a temporary failure: try again later.
	Greylisted Class = "greylisted"
	// Blocked is a permanent refusal aimed at us (our IP, HELO, reverse DNS,
	// policy), never at the mailbox.
	Blocked Class = "blocked"
	// RateLimited says we asked too much too fast; never evidence against
	// the mailbox.
	RateLimited Class = "rate_limited"
	// Unknown is any other reply; never a verdict on the mailbox.
	Unknown Class = "unknown"
)

// Stages of the conversation, as passed to Classify.
const (
	StageBanner = "banner"
	StageEHLO   = "ehlo"
	StageMail   = "mail"
	StageRcpt   = "rcpt"
)

// Reply is one (possibly multi-line) SMTP reply.
type Reply struct {
	// Code is the three-digit reply code.
	Code int
	// Enhanced is the RFC 3463 status code of the first line ("5.1.1"), or "".
	Enhanced string
	// Text is the reply's lines joined by spaces, without the code or the
	// enhanced code, cleaned of control characters and trimmed to 200
	// characters.
	Text string
}

// Hints in reply texts. Servers word the same refusal in many ways, so the
// text is only consulted where the codes are not specific; each list holds
// phrases seen in real replies and matched on word boundaries so that, say,
// "rbl" does not match inside "garbled".
var (
	rateHints = regexp.MustCompile(`\b(too many (recipients|rcpts?|connections|concurrent|simultaneous|sessions|messages|mails|smtp)|rate[ -]?limit\w*|rate that prevents|sending rate|rate exceeded|exceeded the rate|throttl\w*|slow down|too (fast|quickly)|connection limit|recipient limit|max(imum)? (number of )?(recipients|connections))\b`)

	fullHints = regexp.MustCompile(`\b(mailbox (is )?full|inbox (is )?full|over ?quota|quota (exceeded|full)|exceeded (the |their |its )?(storage|quota)|mailbox size limit|out of storage|storage (space )?(full|exceeded))\b`)

	blockedHints = regexp.MustCompile(`\b(spamhaus|spamcop|barracuda\w*|sorbs|uceprotect|blocked|block ?list(ed)?|black ?list(ed)?|deny ?list(ed)?|rbl|dnsbl|listed (at|on|in|by)|reverse (dns|hostname|lookup|name)|ptr|rdns|helo|ehlo|access denied|relay(ing)?|client host|your ip|ip address|reputation|spf|dmarc|dkim|not authori[sz]ed|unauthori[sz]ed|banned|spam|sender address rejected|sender rejected|policy)\b`)

	rejectedHints = regexp.MustCompile(`\b(user unknown|unknown user|no such (user|mailbox|recipient|address|account|person)|mailbox (is )?unavailable|mailbox not found|mailbox (does not|doesn't|does ?n't) exist|(recipient|address|user|account|mailbox) (does not|doesn't) exist|(unknown|invalid) (recipient|mailbox|address|local[- ]part)|recipient (unknown|not found|invalid)|user not found|address unknown|unrout(e)?able address|(does not|doesn't) have an? .{0,40}account|account (is |has been )?(disabled|deactivated|closed|suspended|inactive)|mailbox (is )?(disabled|inactive)|not a valid (mailbox|recipient|user)|no mailbox|unknown or illegal alias|undeliverable address|bad destination)\b`)

	enhancedRe = regexp.MustCompile(`^([245])\.(\d{1,3})\.(\d{1,3})(\s|$)`)
)

// Classify decides what a reply at a stage (StageBanner, StageEHLO,
// StageMail or StageRcpt) says. It reads the code, the RFC 3463 enhanced
// status code and the text. At stages other than rcpt a 5xx is Blocked
// (nothing is known about the mailbox yet, so a refusal is about us) and a
// 4xx is Greylisted or RateLimited.
func Classify(stage string, r Reply) Class {
	switch {
	case r.Code >= 200 && r.Code < 300:
		return Accepted
	case r.Code >= 400 && r.Code < 600:
	default:
		return Unknown
	}
	text := strings.ToLower(r.Text)
	e := r.Enhanced
	// The enhanced code's class digit must agree with the reply code;
	// a server that says "550 4.1.1" is confused and its detail is not
	// trusted.
	if e != "" && e[0] != byte('0'+r.Code/100) {
		e = ""
	}
	subject := enhancedSubject(e) // "1.1" for "5.1.1"
	temporary := r.Code < 500

	if stage != StageRcpt {
		if temporary {
			if subject == "5.3" || rateHints.MatchString(text) {
				return RateLimited
			}
			return Greylisted
		}
		return Blocked
	}

	// X.2.2 is "mailbox full" in RFC 3463, whichever the wording.
	if subject == "2.2" {
		return Full
	}
	// Rate limits come before everything else: a server that limits us
	// says nothing about the mailbox, even when it uses a 5xx or a 5.7.x.
	if subject == "5.3" || rateHints.MatchString(text) {
		return RateLimited
	}
	if temporary {
		if fullHints.MatchString(text) {
			return Full
		}
		return Greylisted
	}

	switch {
	case strings.HasPrefix(subject, "7."):
		// X.7.x is security or policy: about our IP, name or message.
		return Blocked
	case subject == "1.7" || subject == "1.8":
		// Bad sender mailbox or sender domain: about our MAIL FROM.
		return Blocked
	case subject == "4.1" && strings.Contains(text, "recipient address rejected"):
		// Exchange Online's directory-based edge blocking answers
		// "550 5.4.1 Recipient address rejected: Access denied" for
		// addresses missing from the tenant's directory.
		return Rejected
	case strings.HasPrefix(subject, "1.") || subject == "2.1":
		// X.1.x is about the destination address, X.2.1 a disabled
		// mailbox; both are explicit about the mailbox.
		return Rejected
	}
	if fullHints.MatchString(text) {
		return Full
	}
	// The blocked hints go before the rejected ones: wrongly calling a
	// mailbox nonexistent costs more than leaving it unknown.
	if blockedHints.MatchString(text) {
		return Blocked
	}
	if rejectedHints.MatchString(text) {
		return Rejected
	}
	if r.Code == 552 && !strings.Contains(text, "size") && !strings.Contains(text, "too big") && !strings.Contains(text, "too large") {
		// 552 at RCPT is "exceeded storage allocation" (RFC 5321); at
		// this point no message size is known.
		return Full
	}
	return Unknown
}

// enhancedSubject returns "subject.detail" of an enhanced status code
// ("1.1" for "5.1.1"), or "" when there is none.
func enhancedSubject(e string) string {
	if len(e) < 5 {
		return ""
	}
	return e[2:]
}
