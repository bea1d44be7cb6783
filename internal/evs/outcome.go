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
	// Address is the normalised address (verify.NormalizedKey).
	Address string
	Kind    OutcomeKind
	// At is when it happened, by the client's (its ESP's) clock,
	// millisecond precision.
	At time.Time
	// BounceType is BounceHard or BounceSoft for a bounce, else "".
	BounceType string
	// SMTPReply is the receiving server's reply as the client reported
	// it, trimmed to 200 characters; may be empty.
	SMTPReply string
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
	// Detail says in words what the outcome did, e.g. "hard bounce on
	// 2026-11-20".
	Detail string `json:"detail"`
}

// Scopes of DomainHistoryCheck.Scope.
const (
	// DomainScopeAccount: the counts are of the account's own outcomes.
	DomainScopeAccount = "account"
	// DomainScopeShared: the counts are of every account's outcomes, as
	// the operator allowed (EVS_OUTCOME_SHARE_DOMAINS).
	DomainScopeShared = "shared"
)

// DomainCounts are what the reported outcomes of a domain's addresses
// teach about its other addresses: how many of its addresses were
// delivered to, and how many bounced hard. Each address counts once per
// kind, however often mail was sent to it: a list mailed every week would
// otherwise weigh its deliveries 52 times a year and its bounces, which
// end the mailing, once. They are numbers, never the addresses, so they
// can be shared across accounts.
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
