package verify

import (
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// SMTP details that tell a check apart from an answer: a session the mail
// hosts refused at its start with a temporary reply (Throttled), an
// address not asked after the server throttled us (NotAsked) or past the
// session's time budget (Unasked), one not checked because our own SMTP
// exit failed (ExitDown).
const (
	detailOpenTryLater = "the mail hosts asked us to try again later"
	detailNotAsked     = "not asked: the server asked us to slow down before this address"
	detailOutOfTime    = "not asked: the session's time budget ran out before this address"
	// DetailExitDown is the detail of an address not checked because our
	// own SMTP exit failed.
	DetailExitDown = "not checked: our SMTP exit (EVS_SMTP_PROXY) could not be reached or refused us"
)

// ExitDown tells whether an SMTP check records no verdict because our own
// SMTP exit failed: a batch tries the address again later, and /v1/verify
// answers 503.
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
// never asked about, because the server throttled us on an earlier one: a
// caller that can wait runs it again after the provider's pause.
func NotAsked(c evs.SMTPCheck) bool { return c.Detail == detailNotAsked }

// Throttled tells whether an SMTP check records a reply that asks us to
// slow down: a 421, or a temporary reply about our rate (not a plain
// greylisting, which asks for a retry of that address only). atOpen: the
// reply refused the session itself, so no address of it was asked.
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

// ProviderKey names the provider an MX host belongs to, for politeness,
// which is counted per provider (one service sees all our sessions, under
// whatever host names): the known provider, else the host's registrable
// domain (mx1.example.co.uk → example.co.uk), else the host itself.
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
