package evs

import (
	"strings"
	"time"
)

// OutcomeKind is what happened when mail was sent to an address.
type OutcomeKind string

// The four outcome kinds a client reports.
const (
	OutcomeDelivered  OutcomeKind = "delivered"
	OutcomeBounced    OutcomeKind = "bounced"
	OutcomeComplained OutcomeKind = "complained"
	OutcomeDeferred   OutcomeKind = "deferred"
)

// Bounce types of a bounced outcome.
const (
	BounceHard = "hard"
	BounceSoft = "soft"
)

// Outcome is one reported event for one of an account's addresses. The
// account, Address (normalised), Kind and At are its natural key: the same
// event reported twice is kept once.
type Outcome struct {
	Address    string // normalised (verify.NormalizedKey)
	Kind       OutcomeKind
	At         time.Time // by the client's (its ESP's) clock, in milliseconds
	BounceType string    // BounceHard or BounceSoft for a bounce, else ""
	SMTPReply  string    // as the client reported it, at most 200 characters
	// Verdict and Score are the account's last verdict on the address
	// before At, as kept when the outcome was received; Verdict is ""
	// when the account had none (GET /v1/outcomes/report's "not
	// verified").
	Verdict Status
	Score   int
}

// HardBounce tells whether o is a hard bounce: the one kind that makes a
// verdict undeliverable.
func (o Outcome) HardBounce() bool {
	return o.Kind == OutcomeBounced && o.BounceType == BounceHard
}

// History results of HistoryCheck.Result.
const (
	// HistoryKnownBounce: a hard bounce, later than any delivery, made
	// the verdict undeliverable/known_bounce.
	HistoryKnownBounce = "known_bounce"
	// HistoryDelivered: a delivery, later than any hard bounce, made an
	// accept-all verdict deliverable/accepted_email.
	HistoryDelivered = "delivered"
	// HistoryNoted: the account reported outcomes for the address, but
	// none changed the verdict (a soft bounce, a complaint, a deferral,
	// or the checks already said as much).
	HistoryNoted = "noted"
)

// HistoryCheck is the evidence from the account's reported outcomes
// (decision.checks.history): the outcome that decided the verdict, or the
// latest one when none did.
type HistoryCheck struct {
	Result     string      `json:"result"`
	Outcome    OutcomeKind `json:"outcome"`
	At         Time        `json:"at"`
	BounceType string      `json:"bounceType,omitempty"`
	SMTPReply  string      `json:"smtpReply,omitempty"`
	Detail     string      `json:"detail"` // what the outcome did, e.g. "hard bounce on 2026-11-20"
}

// Scopes of DomainHistoryCheck.Scope.
const (
	DomainScopeAccount = "account" // the account's own outcomes
	DomainScopeShared  = "shared"  // every account's (EVS_OUTCOME_SHARE_DOMAINS)
)

// DomainCounts are how many of a domain's addresses were delivered to and
// how many bounced hard. Each address counts once per kind, however often it
// was mailed: a weekly list would otherwise weigh its deliveries 52 times a
// year and its bounces, which end the mailing, once. Being numbers, never
// addresses, they can be shared across accounts.
type DomainCounts struct {
	Delivered   int `json:"delivered"`
	HardBounces int `json:"hardBounces"`
}

// Add counts by (-1: uncounts) an address of class (ClassDelivered or
// ClassHardBounce) and reports whether class is one that is counted.
func (c *DomainCounts) Add(class string, by int) bool {
	switch class {
	case ClassDelivered:
		c.Delivered += by
	case ClassHardBounce:
		c.HardBounces += by
	default:
		return false
	}
	return true
}

// Kinds of DomainClass: what an outcome counts as in DomainCounts.
const (
	ClassDelivered  = "delivered"
	ClassHardBounce = "hard_bounce"
)

// DomainClass is what o counts as in its domain's counts: ClassDelivered,
// ClassHardBounce, or "" for an outcome that is neither.
func (o Outcome) DomainClass() string {
	switch {
	case o.Kind == OutcomeDelivered:
		return ClassDelivered
	case o.HardBounce():
		return ClassHardBounce
	}
	return ""
}

// Zero tells whether nothing is counted.
func (c DomainCounts) Zero() bool { return c.Delivered <= 0 && c.HardBounces <= 0 }

// DomainHistoryCheck is the evidence from the outcomes reported for the
// address's domain (decision.checks.domainHistory): present only on a
// verdict whose score it moves, an accept-all or unchecked mailbox
// (verify.ApplyHistory), so the score stays a function of the evidence.
type DomainHistoryCheck struct {
	Scope string `json:"scope"`
	DomainCounts
}

// AddressDomain is the domain part of a normalised address (after its
// last "@": a quoted local part may hold one): what domain counts are
// kept by.
func AddressDomain(normalized string) string {
	return normalized[strings.LastIndexByte(normalized, '@')+1:]
}
