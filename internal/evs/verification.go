package evs

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Status is the outcome label of a verification.
type Status string

// The four outcome labels.
const (
	Deliverable   Status = "deliverable"
	Undeliverable Status = "undeliverable"
	Risky         Status = "risky"
	Unknown       Status = "unknown"
)

// Reason is the one code that explains a Status.
type Reason string

// Every reason code of the contract, grouped by the status it leads to.
const (
	ReasonAcceptedEmail Reason = "accepted_email"

	ReasonInvalidSyntax Reason = "invalid_syntax"
	ReasonInvalidDomain Reason = "invalid_domain"
	ReasonNoMailServer  Reason = "no_mail_server"
	ReasonRejectedEmail Reason = "rejected_email"
	// ReasonKnownBounce: the account reported a hard bounce for the
	// address, later than any delivery.
	ReasonKnownBounce Reason = "known_bounce"

	ReasonAcceptAll   Reason = "accept_all"
	ReasonMailboxFull Reason = "mailbox_full"
	ReasonDisposable  Reason = "disposable"

	ReasonGreylisted      Reason = "greylisted"
	ReasonSMTPUnreachable Reason = "smtp_unreachable"
	// ReasonBlocked: a server answered with a refusal about us (our
	// address on a blocklist, our HELO name, our sender), not the mailbox.
	ReasonBlocked Reason = "blocked"
	// ReasonAmbiguousReply: a server answered, but nothing in the reply
	// says whether the mailbox exists.
	ReasonAmbiguousReply    Reason = "ambiguous_reply"
	ReasonDNSError          Reason = "dns_error"
	ReasonTimeout           Reason = "timeout"
	ReasonMailboxNotChecked Reason = "mailbox_not_checked"
)

// Reasons lists every reason code in the contract's order.
func Reasons() []Reason {
	return []Reason{
		ReasonAcceptedEmail,
		ReasonInvalidSyntax, ReasonInvalidDomain, ReasonNoMailServer, ReasonRejectedEmail, ReasonKnownBounce,
		ReasonAcceptAll, ReasonMailboxFull, ReasonDisposable,
		ReasonGreylisted, ReasonSMTPUnreachable, ReasonBlocked, ReasonAmbiguousReply, ReasonDNSError, ReasonTimeout, ReasonMailboxNotChecked,
	}
}

// StatusOf returns the status a reason leads to; every reason has exactly one.
func StatusOf(r Reason) Status {
	switch r {
	case ReasonAcceptedEmail:
		return Deliverable
	case ReasonInvalidSyntax, ReasonInvalidDomain, ReasonNoMailServer, ReasonRejectedEmail, ReasonKnownBounce:
		return Undeliverable
	case ReasonAcceptAll, ReasonMailboxFull, ReasonDisposable:
		return Risky
	default:
		return Unknown
	}
}

// Mode selects how deep a verification goes.
type Mode string

// The two modes: quick never opens an SMTP connection.
const (
	ModeFull  Mode = "full"
	ModeQuick Mode = "quick"
)

// ParseMode returns the Mode for s, with "" meaning full; ok is false for any
// other string.
func ParseMode(s string) (Mode, bool) {
	switch s {
	case "", string(ModeFull):
		return ModeFull, true
	case string(ModeQuick):
		return ModeQuick, true
	}
	return "", false
}

// Decision is the whole, explained verdict on one address: the API's
// "decision" object, rendered as it is, so its JSON tags and field order are
// the contract's; the rules the encoding does not give (the timestamp layout,
// provider null when unknown) live on the field types.
type Decision struct {
	Email      string `json:"email"`
	Normalized string `json:"normalized"`
	Reason     Reason `json:"reason"`
	// Score (0–100) is how likely mail to the address is delivered and not
	// bounced: verify.Score of the fields below (docs/score.md). The
	// engine sets it; the stores do not keep it, so the API recomputes it
	// from the stored evidence when it renders or filters a decision.
	Score      int     `json:"score"`
	Mode       Mode    `json:"mode"`
	Suggestion *string `json:"suggestion"`
	Flags      Flags   `json:"flags"`
	Checks     Checks  `json:"checks"`
	CheckedAt  Time    `json:"checkedAt"`
	DurationMs int64   `json:"durationMs"`
	TestMode   bool    `json:"testMode,omitempty"` // only for test-mode accounts
	// Cached is set when the verdict was reused from the account's cache;
	// CheckedAt is then the original check's.
	Cached bool `json:"cached"`
}

// Status returns the outcome label the decision's reason leads to.
func (d Decision) Status() Status { return StatusOf(d.Reason) }

// Flags are facts about the address that do not change Status by themselves
// (except disposable, which is also a reason).
type Flags struct {
	Disposable bool `json:"disposable"`
	Role       bool `json:"role"`
	Free       bool `json:"free"`
	AcceptAll  bool `json:"acceptAll"`
	// SMTPUTF8 marks a UTF-8 local part (RFC 6531): the receiving server must
	// support SMTPUTF8 to take it.
	SMTPUTF8 bool `json:"smtputf8"`
	// AcceptAllUnknown says that whether the domain accepts any address
	// is not known (SMTPCheck.AcceptAllUnknown): acceptAll renders as
	// null. Whoever makes or decodes a decision sets it from the checks.
	AcceptAllUnknown bool `json:"-"`
}

// MarshalJSON renders the flags in the contract's order, acceptAll null
// when it is not known.
func (f Flags) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 96)
	b = append(b, `{"disposable":`...)
	b = strconv.AppendBool(b, f.Disposable)
	b = append(b, `,"role":`...)
	b = strconv.AppendBool(b, f.Role)
	b = append(b, `,"free":`...)
	b = strconv.AppendBool(b, f.Free)
	b = append(b, `,"acceptAll":`...)
	if f.AcceptAllUnknown {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendBool(b, f.AcceptAll)
	}
	b = append(b, `,"smtputf8":`...)
	b = strconv.AppendBool(b, f.SMTPUTF8)
	return append(b, '}'), nil
}

// Checks carries the evidence behind the decision, one object per stage.
// Every stage is always present: a stage that did not run says so in its
// result ("not_checked", "skipped") rather than by being absent.
type Checks struct {
	Syntax SyntaxCheck `json:"syntax"`
	DNS    DNSCheck    `json:"dns"`
	SMTP   SMTPCheck   `json:"smtp"`
	// History is the evidence of the account's reported outcomes for the
	// address (verify.ApplyHistory); nil, and absent, when there are none.
	History *HistoryCheck `json:"history,omitempty"`
	// DomainHistory is the evidence of the outcomes reported for the
	// domain; nil, and absent, unless it moved the score of an accept-all
	// or unchecked mailbox.
	DomainHistory *DomainHistoryCheck `json:"domainHistory,omitempty"`
}

// SyntaxCheck is the syntax stage's evidence.
type SyntaxCheck struct {
	Valid bool   `json:"valid"`
	Error string `json:"error,omitempty"` // the rule an invalid address broke ("consecutive_dots")
}

// DNS result values of DNSCheck.Result.
const (
	DNSOK         = "ok"
	DNSNXDomain   = "nxdomain"
	DNSNullMX     = "null_mx"
	DNSNoRecords  = "no_records"
	DNSError      = "error"
	DNSNotChecked = "not_checked"
	// DNSMXNotPublic: the domain has mail hosts, but every address of
	// those we may try is one the egress policy refuses (loopback,
	// private, link-local...), so none was contacted. Found in full mode
	// only, when the probe looks the addresses up.
	DNSMXNotPublic = "mx_not_public"
)

// DNSCheck is the DNS stage's evidence.
type DNSCheck struct {
	Result string `json:"result"` // one of the DNS* constants
	// MX lists the mail hosts in preference order (the domain itself when
	// ImplicitMX is true). The contract shows an empty list, never null:
	// every maker of a decision sets it non-nil, and the API's Rendered
	// makes sure.
	MX         []string `json:"mx"`
	ImplicitMX bool     `json:"implicitMx"`
	Rcode      string   `json:"rcode,omitempty"` // the deciding response code; empty on a timeout
	Error      string   `json:"error,omitempty"` // what failed when Result is "error" (servfail, timeout...)
}

// SMTP result values of SMTPCheck.Result.
const (
	SMTPAccepted    = "accepted"
	SMTPRejected    = "rejected"
	SMTPAcceptAll   = "accept_all"
	SMTPFull        = "full"
	SMTPGreylisted  = "greylisted"
	SMTPUnreachable = "unreachable"
	SMTPTimeout     = "timeout"
	SMTPSkipped     = "skipped"
)

// SMTPCheck is the SMTP stage's evidence: the reply that decided the result.
type SMTPCheck struct {
	Result string `json:"result"`
	Host   string `json:"host,omitempty"`
	// Provider names the mail service behind the MX (smtpprobe.Provider:
	// "google", "microsoft365", ... or "other"), or "" when no MX was
	// found, which the contract shows as null.
	Provider     Provider `json:"provider"`
	Code         int      `json:"code,omitempty"`
	EnhancedCode string   `json:"enhancedCode,omitempty"`
	Message      string   `json:"message,omitempty"` // the server's reply text, at most 200 characters
	TLS          bool     `json:"tls"`
	// CatchAll is the result of the random-address (accept-all) probe on
	// the domain when one decided this check (accepted, rejected,
	// greylisted...), else "". A rejected probe is what makes an accepted
	// mailbox proof rather than a hint.
	CatchAll string `json:"catchAll,omitempty"`
	// Detail says, in our words, why the result is what it is (for example
	// "skipped: quick mode" or "blocked: the server refused our IP").
	Detail string `json:"detail,omitempty"`
}

// AcceptAllUnknown tells whether c accepted the mailbox without the
// random-address probe showing that the server rejects unknown ones: the
// probe got a 4xx, a refusal about us, or nothing usable. ("" is a check
// stored before the probe's answer was, read as it was then.)
func (c SMTPCheck) AcceptAllUnknown() bool {
	return c.Result == SMTPAccepted && c.CatchAll != "" && c.CatchAll != SMTPRejected
}

// Valid tells whether r is one of the contract's reason codes.
func (r Reason) Valid() bool { return slices.Contains(Reasons(), r) }

// Provider names the mail service behind a domain's preferred MX host, or
// is "" when none was found: the contract shows that as null, not as an
// empty name.
type Provider string

// MarshalJSON renders p as a JSON string, or null when it is empty.
func (p Provider) MarshalJSON() ([]byte, error) {
	if p == "" {
		return jsonNull, nil
	}
	return json.Marshal(string(p))
}

// jsonNull is shared: encoding/json copies a marshaler's bytes.
var jsonNull = []byte("null")

// Time is a time.Time that marshals as RFC 3339 UTC with milliseconds and a
// Z, as the contract requires for every timestamp.
type Time struct{ time.Time }

// TimeLayout is the contract's timestamp layout.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// MarshalJSON renders t in TimeLayout, in UTC.
func (t Time) MarshalJSON() ([]byte, error) {
	// AppendFormat writes all nine digits of the nanoseconds before it
	// cuts them to three: room for six more spares it a second buffer.
	b := make([]byte, 0, len(TimeLayout)+2+6)
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, TimeLayout)
	return append(b, '"'), nil
}

// UnmarshalJSON parses an RFC 3339 timestamp.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	p, err := time.Parse(`"`+time.RFC3339Nano+`"`, string(b))
	if err != nil {
		return fmt.Errorf("evs: timestamp: %w", err)
	}
	t.Time = p.UTC()
	return nil
}
