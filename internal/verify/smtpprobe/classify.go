package smtpprobe

import (
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
	// characters. (The classification read the whole reply, not only
	// these 200 characters.)
	Text string
}

// Reading is what Read makes of a reply: its class and what decided it.
type Reading struct {
	// Class is the verdict on the reply.
	Class Class
	// Family names the phrase family of the text that decided Class (see
	// Families), or "" when the codes alone decided it.
	Family string
}

// Classify decides what a reply at a stage (StageBanner, StageEHLO,
// StageMail or StageRcpt) says; it is Read without the explanation.
func Classify(stage string, r Reply) Class { return Read(stage, r).Class }

// Read decides what a reply at a stage says, reading its code, its RFC
// 3463 enhanced status code and its whole text (every line).
//
// At stages other than rcpt a 5xx is Blocked (nothing is known about the
// mailbox yet, so a refusal is about us) and a 4xx is Greylisted or
// RateLimited. At rcpt the precedence is, first match wins:
//
//  1. 2xx: Accepted. Any code outside 4xx/5xx: Unknown.
//  2. Text about our rate: RateLimited; other text about us (the client,
//     the sender, policy): Blocked, or Greylisted on a 4xx. This always
//     beats any code: a refusal of our prober is never evidence against
//     the mailbox.
//  3. X.5.3 (too many recipients): RateLimited.
//  4. X.2.2 or text about a full mailbox: Full.
//  5. Any other 4xx: Greylisted.
//  6. Text about the recipient's account (its state, or the address being
//     unknown): Rejected, whatever the code says.
//  7. Codes alone: X.7.x, X.1.7, X.1.8 Blocked; X.1.x (but X.1.0) and
//     X.2.1 Rejected; 552 without a size complaint Full.
//  8. Anything else: Unknown.
func Read(stage string, r Reply) Reading {
	switch {
	case r.Code >= 200 && r.Code < 300:
		return Reading{Class: Accepted}
	case r.Code >= 400 && r.Code < 600:
	default:
		return Reading{Class: Unknown}
	}
	text := normalize(r.Text)
	e := r.Enhanced
	// The enhanced code's class digit must agree with the reply code;
	// a server that says "550 4.1.1" is confused and its detail is not
	// trusted.
	if e != "" && e[0] != byte('0'+r.Code/100) {
		e = ""
	}
	subject := enhancedSubject(e) // "1.1" for "5.1.1"
	temporary := r.Code < 500
	fam := matchFamily(text)

	if stage != StageRcpt {
		switch {
		case fam != nil && fam.Class == RateLimited, temporary && subject == "5.3":
			return Reading{Class: RateLimited, Family: fam.name()}
		case temporary:
			return Reading{Class: Greylisted, Family: fam.name()}
		}
		return Reading{Class: Blocked, Family: fam.name()}
	}

	if fam != nil && fam.aboutUs() {
		if fam.Class == Blocked && temporary {
			return Reading{Class: Greylisted, Family: fam.Name}
		}
		return Reading{Class: fam.Class, Family: fam.Name}
	}
	switch {
	case subject == "5.3":
		return Reading{Class: RateLimited}
	case fam != nil && fam.Class == Full:
		return Reading{Class: Full, Family: fam.Name}
	case subject == "2.2":
		return Reading{Class: Full}
	case temporary:
		return Reading{Class: Greylisted}
	case fam != nil && fam.Class == Rejected:
		return Reading{Class: Rejected, Family: fam.Name}
	case strings.HasPrefix(subject, "7."):
		// X.7.x is security or policy: about our IP, name or message.
		return Reading{Class: Blocked}
	case subject == "1.7" || subject == "1.8":
		// Bad sender mailbox or sender domain: about our MAIL FROM.
		return Reading{Class: Blocked}
	case subject == "1.0":
		// "Other address status": Exchange uses it for "sender denied",
		// others for SPF failures. Without text about the recipient it
		// says nothing certain.
		return Reading{Class: Unknown}
	case strings.HasPrefix(subject, "1.") || subject == "2.1":
		// X.1.x is about the destination address, X.2.1 a disabled
		// mailbox; both are explicit about the mailbox.
		return Reading{Class: Rejected}
	case r.Code == 552 && !sizeComplaint(text):
		// 552 at RCPT is "exceeded storage allocation" (RFC 5321); at
		// this point no message size is known.
		return Reading{Class: Full}
	}
	return Reading{Class: Unknown}
}

func sizeComplaint(text string) bool {
	return strings.Contains(text, "size") || strings.Contains(text, "too big") || strings.Contains(text, "too large")
}

// enhancedSubject returns "subject.detail" of an enhanced status code
// ("1.1" for "5.1.1"), or "" when there is none.
func enhancedSubject(e string) string {
	if len(e) < 5 {
		return ""
	}
	return e[2:]
}
