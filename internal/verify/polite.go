package verify

import (
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// detailOpenTryLater is the SMTP detail of a session the mail hosts
// refused at its start with a temporary reply: Throttled tells it from a
// refusal at RCPT by it.
const detailOpenTryLater = "the mail hosts asked us to try again later"

// detailNotAsked is the SMTP detail of an address a session never asked
// about because the server throttled us on an earlier one: NotAsked tells
// it apart from an answer.
const detailNotAsked = "not asked: the server asked us to slow down before this address"

// detailOutOfTime is the SMTP detail of an address a session left
// unasked because its time budget (AskUntil) would not have held the
// reply: Unasked tells it apart from an answer.
const detailOutOfTime = "not asked: the session's time budget ran out before this address"

// DetailExitDown is the SMTP detail of an address whose session could not
// open because our own SMTP exit (EVS_SMTP_PROXY) failed: ExitDown tells
// it apart from a fact about the receiving server.
const DetailExitDown = "not checked: our SMTP exit (EVS_SMTP_PROXY) could not be reached or refused us"

// ExitDown tells whether an SMTP check records no verdict because our own
// SMTP exit failed (contract, section 16): a batch tries the address
// again later, and /v1/verify answers 503 unavailable.
func ExitDown(c evs.SMTPCheck) bool { return c.Detail == DetailExitDown }

// detailBlocked starts the SMTP detail of a refusal about us (our address,
// HELO name or sender), not the mailbox: Blocked tells it.
const detailBlocked = "blocked: "

// Blocked tells whether an SMTP check records a refusal about us rather
// than the mailbox: reason blocked (contract, section 2).
func Blocked(c evs.SMTPCheck) bool { return strings.HasPrefix(c.Detail, detailBlocked) }

// detailBrokeAtRCPT is the SMTP detail of a session the server had opened
// and then dropped at RCPT: it answered, but said nothing of the mailbox.
const detailBrokeAtRCPT = "the connection failed during RCPT"

// Replied tells whether a mail server answered the probe behind an SMTP
// check: a reply code, or a session it opened before the failure. Only an
// unreachable check without one is smtp_unreachable (contract, section 2).
func Replied(c evs.SMTPCheck) bool { return c.Code != 0 || c.Detail == detailBrokeAtRCPT }

// NotAsked tells whether an SMTP check records an address its session
// never asked about, because the server throttled us on an earlier one
// (see Throttled). Nothing is known about such a mailbox: a caller that can
// wait runs it again once the provider's pause is over.
func NotAsked(c evs.SMTPCheck) bool { return c.Detail == detailNotAsked }

// Throttled tells whether an SMTP check records a reply that asks us to
// slow down: a 421 (the server closes the channel on us), or a temporary
// reply the classifier reads as about our rate (a 4.7.x "too many
// connections", "rate limited", ...). A plain greylisting reply is not one:
// it asks for a retry of that address, not for less traffic.
//
// atOpen is true when the reply refused the session itself (banner, EHLO
// or MAIL), so that no address of the session was asked: the caller may
// run them again later without asking any server twice.
func Throttled(c evs.SMTPCheck) (throttled, atOpen bool) {
	if c.Code < 400 || c.Code >= 500 {
		return false, false
	}
	atOpen = c.Detail == detailOpenTryLater
	if c.Code == 421 {
		return true, atOpen
	}
	stage := smtpprobe.StageRcpt
	if atOpen {
		stage = smtpprobe.StageMail
	}
	rd := smtpprobe.ReadFrom(stage, smtpprobe.Provider(c.Provider), smtpprobe.Reply{Code: c.Code, Enhanced: c.EnhancedCode, Text: c.Message})
	return rd.Class == smtpprobe.RateLimited, atOpen
}

// Politeness is counted per mail provider, not per MX host: Microsoft 365
// gives every tenant its own *.mail.protection.outlook.com host and Google
// answers on several names, yet each is one service that sees all of our
// sessions together (contract, section 14).

// ProviderKey names the provider an MX host belongs to, for politeness: the
// provider of section 2 where it is known (google, microsoft365, ...),
// else the host's registrable domain (mx1.example.co.uk → example.co.uk),
// else the host itself.
func ProviderKey(host string) string {
	h := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(host)), ".")
	if p := smtpprobe.ProviderOf(h); p != smtpprobe.ProviderOther && p != "" {
		return string(p)
	}
	if d, err := publicsuffix.EffectiveTLDPlusOne(h); err == nil {
		return d
	}
	return h
}

// Provider classes: the defaults of the limits differ by class.
const (
	// ClassLarge is the mailbox providers that run large pools of MX
	// front ends for millions of mailboxes.
	ClassLarge = "large"
	// ClassGateway is the filtering gateways many companies put in front
	// of their mail: shared by many tenants, but each tenant's mail is
	// passed on to a server of its own.
	ClassGateway = "gateway"
	// ClassOther is everything else: often one server of one company.
	ClassOther = "other"
)

// ProviderClass returns the class of a provider key.
func ProviderClass(provider string) string {
	switch smtpprobe.Provider(provider) {
	case smtpprobe.ProviderGoogle, smtpprobe.ProviderMicrosoft365, smtpprobe.ProviderOutlook,
		smtpprobe.ProviderYahoo, smtpprobe.ProviderICloud:
		return ClassLarge
	case smtpprobe.ProviderProofpoint, smtpprobe.ProviderMimecast, smtpprobe.ProviderBarracuda,
		smtpprobe.ProviderCisco, smtpprobe.ProviderTrendMicro:
		return ClassGateway
	}
	return ClassOther
}
