package smtpprobe

import (
	"cmp"
	"regexp"
	"strings"
)

// Class is what one SMTP reply says about the mailbox (or about us).
type Class string

// The classes a reply can fall in. Only Accepted, Rejected and Full are
// statements about the mailbox; the others say the probe could not tell.
const (
	Accepted    Class = "accepted"     // 2xx (at RCPT: the server takes mail for the mailbox)
	Rejected    Class = "rejected"     // permanent: the mailbox does not exist or is disabled
	Full        Class = "full"         // an over-quota mailbox (X.2.2)
	Greylisted  Class = "greylisted"   // temporary: try again later
	Blocked     Class = "blocked"      // a permanent refusal aimed at us, never at the mailbox
	RateLimited Class = "rate_limited" // we asked too much too fast
	Unknown     Class = "unknown"      // any other reply
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
	Code     int
	Enhanced string // the RFC 3463 status code of the first line ("5.1.1"), or ""
	// Text is the reply's lines joined by spaces, without the codes,
	// cleaned of control characters and trimmed to 200 characters (the
	// classification read the whole reply).
	Text string
}

// Reading is what Read makes of a reply: its class and the evidence that
// decided it.
type Reading struct {
	Class Class
	Rule  string // the row of the decision table (REPLIES.md) that decided
	// Family names the phrase family of the text that decided Class, or ""
	// when the codes alone decided it.
	Family   string
	Wrapper  string   // the MTA wrapper set aside before reading the text, or ""
	Provider Provider // the provider whose own rule decided, or ""
	// Author is the provider whose fingerprint the whole reply carries
	// (Gmail's "gsmtp", Microsoft's "AS(...)"), or "".
	Author Provider
}

// ReadFrom decides what a reply at a stage says, coming from an MX host of
// provider p ("" or ProviderOther when unknown).
//
// Each part of the reply is evidence about the mailbox, about us (our
// client, sender, rate or a policy we hit), about the server's own
// system, or about nothing: the reply code, the RFC 3463 enhanced code,
// the MTA's wrapper (Postfix's "Recipient address rejected:" says
// nothing, its "Client host rejected:" speaks of us) and the text's
// phrases (Families). At stages before RCPT nothing is known of the
// mailbox yet: a 5xx is Blocked, a 4xx Greylisted or RateLimited. At RCPT
// the first row that applies decides (REPLIES.md renders the table):
//
//  1. 2xx: Accepted. A code outside 4xx/5xx: Unknown.
//  2. A rule of the provider that wrote the reply (Microsoft 365's
//     5.4.1 directory-based edge blocking, Yandex's 5.7.1 "No such user!",
//     Outlook.com's 5.5.0 "mailbox unavailable", QQ's frequency limit), or
//     of the MTA whose own reply it is (OpenSMTPD's 524 5.2.4).
//  3. Text naming a full mailbox, nothing about us: Full.
//  4. A 5xx whose text names our IP or host, or an allowance of ours that
//     is spent (a daily or relay quota): Blocked, even when it gives our
//     rate as the cause.
//  5. Rate: text about our rate or X.5.3: RateLimited.
//  6. Us: other explicit text about us, or a wrapper or code of a front
//     about us: Blocked (Greylisted on a 4xx). This beats every
//     statement about the mailbox: a refusal of our prober is never
//     evidence against it.
//  7. The server's own trouble in the text: Unknown (Greylisted on a 4xx).
//  8. Quota words, or X.2.2: Full.
//  9. Any other 4xx: Greylisted.
//  10. Explicit text about the mailbox (unknown, disabled): Rejected,
//     unless the enhanced code speaks of us or the system (X.3-X.7, X.1.7,
//     X.1.8): then the parts disagree and the answer is Unknown — except
//     that under X.3 or X.7, which many servers put on every refusal, the
//     words win when nothing else in the text speaks of us or the system.
//  11. A code about the mailbox (X.1.1, X.1.3-X.1.6, X.1.10, X.2.1): Rejected,
//     unless a refusal in the text leaves it open whom it refuses: Unknown.
//  12. 552 without a complaint about size: Full (RFC 5321).
//  13. A refusal that names a mail filter or reputation service (Proofpoint,
//     SenderBase, Mimecast …), or other code or words about us: Blocked.
//     Anything else: Unknown.
func ReadFrom(stage string, p Provider, r Reply) Reading {
	switch {
	case r.Code >= 200 && r.Code < 300:
		return Reading{Class: Accepted, Rule: "accepted"}
	case r.Code >= 400 && r.Code < 600:
	default:
		return Reading{Class: Unknown, Rule: "odd_code"}
	}
	ev := gather(r)
	author := ev.author
	if ev.author != "" && (p == "" || p == ProviderOther || ev.nested) {
		p = ev.author
	}
	temporary := r.Code < 500

	if stage != StageRcpt {
		rd := Reading{Rule: "before_rcpt", Wrapper: ev.wrapper, Family: ev.first(AboutRate, false).name(), Author: author}
		switch {
		case rd.Family != "" || (temporary && ev.code == AboutRate):
			rd.Class = RateLimited
		case temporary:
			rd.Class = Greylisted
		default:
			rd.Class = Blocked
		}
		return rd
	}

	rd := Reading{Wrapper: ev.wrapper, Author: author}
	decide := func(c Class, rule string, f *Family) Reading {
		rd.Class, rd.Rule, rd.Family = c, rule, f.name()
		return rd
	}
	if c, rule, ok := providerRule(p, r.Code, ev); ok {
		rd.Provider = p
		return decide(c, rule, nil)
	}
	if c, rule, ok := mtaRule(r.Code, ev); ok {
		return decide(c, rule, nil)
	}
	usOrTemp := func(rule string, f *Family) Reading {
		if temporary {
			return decide(Greylisted, rule, f)
		}
		return decide(Blocked, rule, f)
	}
	mailbox := ev.first(AboutMailbox, false)
	rate, us := ev.first(AboutRate, false), ev.first(AboutUs, false)
	switch {
	case ev.first(AboutFull, false) != nil && us == nil:
		return decide(Full, "full", ev.first(AboutFull, false))
	case us != nil && !temporary && (us.Name == "client_blocklist" || us.Name == "client_identity"):
		// A permanent refusal that names our IP or host ("this IP has
		// been blocked for sending too many messages") is a block,
		// even when it gives our rate as the cause.
		return decide(Blocked, "about_us", us)
	case !temporary && ev.named("sender_quota") != nil:
		// So is one for an allowance of ours that is spent ("daily
		// relay quota exceeded"): not a pace to slow down to.
		return decide(Blocked, "about_us", ev.named("sender_quota"))
	case rate != nil:
		return decide(RateLimited, "rate", rate)
	case ev.code == AboutRate:
		return decide(RateLimited, "rate_code", nil)
	case us != nil:
		return usOrTemp("about_us", us)
	case ev.wrapperAbout == AboutUs:
		return usOrTemp("wrapper_about_us", nil)
	case ev.first(AboutSystem, false) != nil:
		if temporary {
			return decide(Greylisted, "system", ev.first(AboutSystem, false))
		}
		return decide(Unknown, "system", ev.first(AboutSystem, false))
	case ev.first(AboutFull, true) != nil:
		return decide(Full, "full", ev.first(AboutFull, true))
	case ev.code == AboutFull:
		return decide(Full, "full_code", nil)
	case temporary:
		return decide(Greylisted, "temporary", nil)
	case mailbox != nil:
		if (ev.code == AboutUs || ev.code == AboutSystem) && !ev.wordsOutrankCode() {
			return decide(Unknown, "conflict", mailbox)
		}
		return decide(Rejected, "mailbox", mailbox)
	case ev.code == AboutMailbox:
		if f := ev.first(AboutUs, true); f != nil {
			return decide(Unknown, "conflict", f)
		}
		return decide(Rejected, "mailbox_code", ev.first(AboutMailbox, true))
	case r.Code == 552 && !sizeComplaint(ev.text) && (ev.code == "" || ev.code == AboutFull):
		return decide(Full, "full_552", nil)
	case ev.named("filter_vendor") != nil:
		// A refusal that names the filter or reputation service that
		// made it is about us, though its words say nothing more.
		return decide(Blocked, "about_us", ev.named("filter_vendor"))
	case ev.first(AboutUs, true) != nil:
		return decide(Blocked, "refusal", ev.first(AboutUs, true))
	case ev.code == AboutUs:
		return decide(Blocked, "about_us_code", nil)
	}
	return decide(Unknown, "no_evidence", ev.first(AboutMailbox, true))
}

// evidence is what each part of one reply says.
type evidence struct {
	// code is what the enhanced code is about ("" for nothing).
	code string
	// subject is the enhanced code's "subject.detail" ("1.1"), or "".
	subject string
	// wrapper names the MTA wrapper set aside, wrapperAbout what it says.
	wrapper, wrapperAbout string
	// text is the normalized text without the wrapper.
	text string
	// families are the phrase families found in text.
	families []*Family
	// author is the provider whose fingerprint the text carries.
	author Provider
	// nested is true when the text quotes another server's reply (a
	// Postfix front's "host X said: ..."): its author is then the one
	// whose rules apply, whatever the MX host is.
	nested bool
}

// wordsOutrankCode tells whether the text's explicit words about the
// mailbox ("no such user", "mailbox disabled") settle a reply whose
// enhanced code is of class X.3 (mail system) or X.7 (security or policy):
// many servers put one of those codes on every refusal, the unknown user's
// too. They settle it only when nothing else in the text speaks of us, our
// rate or the server's trouble, not even weakly ("policy", "denied"), and
// never beside a code about our sender (X.7 subjects do not name one; X.1.7,
// X.1.8 and X.2.3 do, and they stay a conflict).
func (ev *evidence) wordsOutrankCode() bool {
	if len(ev.subject) < 2 || (ev.subject[0] != '3' && ev.subject[0] != '7') {
		return false
	}
	for _, f := range ev.families {
		// A filter's name (in a link, a banner) says nothing of whom a
		// refusal is about.
		if f.About != AboutMailbox && f.Name != "filter_vendor" {
			return false
		}
	}
	// Under a policy code, a mailbox "blocked" or "banned" may be one
	// blocked for us (a per-recipient sender block), not a disabled one.
	return ev.subject[0] != '7' || !blockWordsRe.MatchString(ev.text)
}

// blockWordsRe finds the words of a block in normalized text.
var blockWordsRe = regexp.MustCompile(`block|ban`)

// named returns the family of that name if the text has its phrases.
func (ev *evidence) named(name string) *Family {
	for _, f := range ev.families {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// first returns the first family about a subject, strong or weak.
func (ev *evidence) first(about string, weak bool) *Family {
	for _, f := range ev.families {
		if f.About == about && f.Weak == weak {
			return f
		}
	}
	return nil
}

// gather reads each part of a reply.
func gather(r Reply) evidence {
	text := normalize(r.Text)
	var ev evidence
	ev.author = authorOf(text)
	e := r.Enhanced
	// qmail writes its enhanced code last ("no mailbox here by that
	// name. (#5.1.1)"), Exchange 2003 and Cisco first behind a "#"
	// ("#5.1.0 Address rejected").
	qmail := false
	if e == "" {
		if m := trailingEnhancedRe.FindStringSubmatch(text); m != nil {
			e, qmail = m[1], true
			text = strings.TrimSpace(text[:len(text)-len(m[0])])
		} else if m := hashEnhancedRe.FindStringSubmatch(text); m != nil {
			e = m[1]
			text = text[len(m[0]):]
		}
	}
	// The enhanced code's class digit must agree with the reply code; a
	// server that says "550 4.1.1" is confused and its detail is not
	// trusted.
	if e != "" && e[0] != byte('0'+r.Code/100) {
		e = ""
	}
	text, ev.wrapper, ev.wrapperAbout = unwrapAll(text)
	outer := codeAbout(subjectOf(e))
	if m := hashEnhancedRe.FindStringSubmatch(text); m != nil && m[1][0] == byte('0'+r.Code/100) {
		// A code the wrapped text names itself is more specific than
		// the wrapper's default.
		e = m[1]
		text = text[len(m[0]):]
	}
	// A front that verified the address with the real store quotes the
	// store's reply: read that one, keeping the front's code for whether
	// the refusal is permanent.
	if enhanced, inner, ok := nestedReply(text); ok {
		ev.nested = true
		text = inner
		if enhanced != "" && enhanced[0] == byte('0'+r.Code/100) {
			e = enhanced
		}
		var w, about string
		text, w, about = unwrapAll(text)
		if w != "" {
			ev.wrapper += "+" + w
		}
		// The front's own wrapper or code may say the check was of our
		// sender (reject_unverified_sender: "550 5.1.7 ... said: 550
		// 5.1.1 <verify@...> User unknown"): then the quoted mailbox is
		// ours.
		ev.wrapperAbout = cmp.Or(about, ev.wrapperAbout)
		if outer == AboutUs && !strings.HasPrefix(ev.wrapper, "postfix_recipient") {
			ev.wrapperAbout = AboutUs
		}
	}
	ev.text = text
	ev.subject = subjectOf(e)
	ev.code = codeAbout(ev.subject)
	// Postfix maps a recipient DSN to a sender one when a sender check
	// fails (smtpd_dsn_fix): "User unknown in local recipient table"
	// with X.1.0 rather than X.1.1 is our sender's lookup.
	if ev.subject == "1.0" && postfixTableRe.MatchString(text) {
		ev.wrapperAbout = AboutUs
	}
	// Postfix gives an access-map or policy refusal that names no code of
	// its own X.7.1 (4.7.1 on a 4xx): under its "Recipient address
	// rejected:" wrapper, X.7.1 is the wrapper's default and says nothing.
	// qmail and its recipient-check patches (chkuser, badrcptto,
	// validrcptto) put "(#5.7.1)" on refusals of every kind alike, in
	// words that all begin "sorry,".
	if ev.subject == "7.1" && (strings.HasPrefix(ev.wrapper, "postfix_recipient") || qmail || strings.HasPrefix(text, "sorry, ")) {
		ev.code = ""
	}
	// Under its recipient wrapper Postfix rewrites a sender DSN into a
	// recipient one (smtpd_dsn_fix: X.1.7 becomes X.1.3, X.1.8 X.1.2),
	// so those two say nothing there without words about the mailbox.
	if (ev.subject == "1.2" || ev.subject == "1.3") && strings.HasPrefix(ev.wrapper, "postfix_recipient") {
		ev.code = ""
	}
	if qmail && ev.wrapper == "" {
		ev.wrapper = "qmail"
	}
	ev.families = matchFamilies(text)
	return ev
}

// subjectOf returns "subject.detail" of an enhanced code ("1.1" for
// "5.1.1"), or "".
func subjectOf(e string) string {
	if len(e) < 5 {
		return ""
	}
	return e[2:]
}

// postfixTableRe finds the names of Postfix's recipient tables.
var postfixTableRe = regexp.MustCompile(`in (local|virtual|relay) (recipient|mailbox|alias) table`)

// codeAbout says what an enhanced code's subject.detail is about (RFC
// 3463): "" for the codes that say nothing ("other or undefined" status:
// X.0.0, X.1.0, X.2.0, and X.5.0, which servers put on any refusal).
func codeAbout(sd string) string {
	switch sd {
	case "", "0.0", "1.0", "1.2", "2.0", "5.0", "1.5":
		return ""
	case "1.1", "1.3", "1.4", "1.6", "1.10", "2.1":
		// X.1.10: the recipient's domain has a null MX (RFC 7505).
		// X.1.2, "bad destination system address", speaks of the
		// domain, which the DNS stage has already found to take mail:
		// alone it condemns nothing ("550 5.1.2 User reject"), beside
		// words about the mailbox or domain it agrees with them.
		return AboutMailbox
	case "2.2":
		return AboutFull
	case "5.3":
		return AboutRate
	case "1.7", "1.8", "2.3":
		// Bad sender mailbox or domain; message longer than allowed.
		return AboutUs
	}
	switch sd[0] {
	case '6', '7':
		// Content and security or policy: our message, IP or name.
		return AboutUs
	case '3', '4', '5':
		// The mail system, the network and routing, the protocol.
		return AboutSystem
	case '2':
		// X.2.4 mailing list expansion problem.
		return AboutSystem
	}
	return ""
}

// trailingEnhancedRe finds qmail's enhanced code at the end of the text,
// hashEnhancedRe a "#5.1.0" at its start.
var (
	trailingEnhancedRe = regexp.MustCompile(`\s*\(#([245]\.\d{1,3}\.\d{1,3})\)\s*$`)
	hashEnhancedRe     = regexp.MustCompile(`^#([245]\.\d{1,3}\.\d{1,3})\s*`)
)

// wrapperRe finds an MTA's own prefix before the text of a refusal:
// Postfix's "<addr>: Recipient address rejected:" (also written without
// the address by Microsoft, or with it in brackets), Sendmail's
// "<addr>...", or a bare "<addr>:" or "RCPT TO:<addr>".
var wrapperRe = regexp.MustCompile(`^(?:rcpt to:\s*)?(?:<[^>]{0,320}>|\[[^\]]{0,320}\]|[^\s<>:@]{1,64}@[^\s<>:]{1,255})?\s*(?:(\.\.\.)|:)?\s*(?:(recipient address|sender address|client host|helo command|data command|etrn command|end-of-data|unknown command|message content) rejected:)?\s*`)

// unwrap sets an MTA's wrapper aside and says what the wrapper itself is
// about: "Recipient address rejected:" is Postfix's frame for any refusal
// by a recipient restriction (a policy service, an access map, greylisting,
// a missing mailbox alike), so it says nothing; "Sender address",
// "Client host", "Helo command" rejected speak of us.
func unwrap(text string) (rest, wrapper, about string) {
	m := wrapperRe.FindStringSubmatchIndex(text)
	if m == nil || m[1] == 0 {
		return text, "", ""
	}
	rest = text[m[1]:]
	if rest == "" {
		// Nothing but an address: keep the text for the phrases.
		return text, "", ""
	}
	kind := ""
	if m[4] >= 0 {
		kind = text[m[4]:m[5]]
	}
	switch kind {
	case "recipient address":
		return rest, "postfix_recipient", ""
	case "sender address":
		return rest, "postfix_sender", AboutUs
	case "client host":
		return rest, "postfix_client", AboutUs
	case "helo command":
		return rest, "postfix_helo", AboutUs
	case "data command", "etrn command", "end-of-data", "unknown command", "message content":
		return rest, "postfix_" + strings.ReplaceAll(kind, " ", "_"), AboutUs
	}
	if m[2] >= 0 {
		return rest, "sendmail_address", ""
	}
	return rest, "address", ""
}

// unwrapAll sets aside wrappers in front of wrappers (a Postfix front
// relaying Microsoft's "[addr]: Recipient address rejected: ..."); the
// innermost wrapper about us, if any, speaks for them all.
func unwrapAll(text string) (rest, wrapper, about string) {
	rest = text
	for range 3 {
		r, w, a := unwrap(rest)
		if w == "" {
			break
		}
		rest = r
		wrapper = cmp.Or(wrapper, w)
		about = cmp.Or(a, about)
	}
	return rest, wrapper, about
}

// nestedRe finds the reply of another server quoted by a front: Postfix's
// reject_unverified_recipient says "undeliverable address: host
// mx.example[192.0.2.1] said: 550 5.1.1 ... (in reply to RCPT TO command)";
// Exim's recipient callout puts the store's reply on a line of its own
// after "Callout verification failed:".
var nestedRe = regexp.MustCompile(`^(?:(?:undeliverable address|unverified address|address verification failed)?:?\s*(?:host \S+ said|said)|callout verification failed):\s*([245]\d\d)[ -](?:([245]\.\d{1,3}\.\d{1,3})\s+)?(.*?)\s*(?:\(in reply to [a-z ]+ command\))?\s*$`)

// nestedReply returns the enhanced code and text of the reply text quotes.
func nestedReply(text string) (enhanced, inner string, ok bool) {
	m := nestedRe.FindStringSubmatch(text)
	if m == nil {
		if rest, ok := strings.CutPrefix(text, "undeliverable address: "); ok {
			// A local delivery agent's reason ("unknown user: ...")
			// rather than a quoted reply.
			return "", rest, true
		}
		return "", "", false
	}
	return m[2], m[3], true
}

// providerRule applies the rules that hold for one provider only: they
// read replies whose parts disagree, in the way that provider documents.
func providerRule(p Provider, code int, ev evidence) (Class, string, bool) {
	switch p {
	case ProviderMicrosoft365:
		// Directory-based edge blocking: the address is not in the
		// tenant's directory ("550 5.4.1 Recipient address rejected:
		// Access denied. AS(201806281)").
		if code >= 500 && ev.subject == "4.1" && strings.HasPrefix(ev.text, "access denied") {
			return Rejected, "microsoft365_dbeb", true
		}
		// "550 5.7.504 Recipient address rejected: Access denied" and
		// "550 5.7.505 Access denied, banned recipient": Exchange
		// Online's codes for a recipient it refuses as such.
		if code >= 500 && (ev.subject == "7.504" || ev.subject == "7.505") && strings.Contains(ev.text, "access denied") {
			return Rejected, "microsoft365_recipient_refused", true
		}
	}
	switch p {
	case ProviderOutlook, ProviderMicrosoft365:
		// Outlook.com (and Exchange Online's shared front) answers an
		// address it does not have with "550 5.5.0 Requested action
		// not taken: mailbox unavailable (S2017062302)".
		if code >= 500 && ev.subject == "5.0" && strings.Contains(ev.text, "mailbox unavailable") && ev.first(AboutUs, false) == nil {
			return Rejected, "outlook_mailbox_unavailable", true
		}
	case ProviderYandex:
		// "550 5.7.1 No such user!" is Yandex's unknown user.
		if code >= 500 && ev.subject == "7.1" && strings.Contains(ev.text, "no such user") {
			return Rejected, "yandex_no_such_user", true
		}
	case ProviderCisco:
		// Cisco Secure Email's LDAP accept query refuses an address
		// missing from the directory with "550 #5.1.0 Address
		// rejected".
		if code >= 500 && ev.subject == "1.0" && strings.HasPrefix(ev.text, "address rejected") {
			return Rejected, "cisco_ldap_accept", true
		}
	case ProviderQQ:
		// QQ Mail says "mailbox unavailable or access denied" when one
		// sender writes to a mailbox too often, not for unknown users.
		if strings.Contains(ev.text, "mailbox unavailable or access denied") {
			return RateLimited, "qq_frequency_limit", true
		}
	}
	return "", "", false
}

// mtaRule applies what one MTA's own reply means, known by a fingerprint
// no other MTA sends: OpenSMTPD answers a recipient it cannot expand —
// an unknown user of a virtual domain — with its own code 524 and "5.2.4
// Mailing list expansion problem: <rcpt>". A permanent expansion failure
// means mail to the address cannot arrive, whatever the cause.
func mtaRule(code int, ev evidence) (Class, string, bool) {
	if code == 524 && ev.subject == "2.4" && strings.HasPrefix(ev.text, "mailing list expansion problem") {
		return Rejected, "opensmtpd_expansion", true
	}
	return "", "", false
}

func sizeComplaint(text string) bool {
	return strings.Contains(text, "size") || strings.Contains(text, "too big") || strings.Contains(text, "too large")
}
