package api

import (
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// The wire forms of the domain types: the JSON the contract shows. The domain
// (package evs) carries no JSON tags, so the contract's field names live here
// and nowhere else.

// Decision is the "decision" object of the contract, section 2.
type Decision struct {
	Email      string     `json:"email"`
	Normalized string     `json:"normalized"`
	Reason     evs.Reason `json:"reason"`
	// Score (0–100) is how likely mail to the address is delivered and
	// not bounced (docs/score.md).
	Score      int      `json:"score"`
	Mode       evs.Mode `json:"mode"`
	Suggestion *string  `json:"suggestion"`
	Flags      Flags    `json:"flags"`
	Checks     Checks   `json:"checks"`
	CheckedAt  Time     `json:"checkedAt"`
	DurationMs int64    `json:"durationMs"`
	TestMode   bool     `json:"testMode,omitempty"`
	// Cached is true when the verdict was reused from the account's
	// cache; CheckedAt is then the original check's (contract, section 12).
	Cached bool `json:"cached"`
}

// Flags is the "flags" object of a decision.
type Flags struct {
	Disposable bool `json:"disposable"`
	Role       bool `json:"role"`
	Free       bool `json:"free"`
	AcceptAll  bool `json:"acceptAll"`
	SMTPUTF8   bool `json:"smtputf8"`
}

// Checks is the "checks" object of a decision: the evidence, one object per
// stage, every stage always present.
type Checks struct {
	Syntax SyntaxCheck `json:"syntax"`
	DNS    DNSCheck    `json:"dns"`
	SMTP   SMTPCheck   `json:"smtp"`
}

// SyntaxCheck is the syntax stage's evidence.
type SyntaxCheck struct {
	Valid bool   `json:"valid"`
	Error string `json:"error,omitempty"`
}

// DNSCheck is the DNS stage's evidence.
type DNSCheck struct {
	Result     string   `json:"result"`
	MX         []string `json:"mx"`
	ImplicitMX bool     `json:"implicitMx"`
	Rcode      string   `json:"rcode,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// SMTPCheck is the SMTP stage's evidence: the reply that decided the result.
type SMTPCheck struct {
	Result string `json:"result"`
	Host   string `json:"host,omitempty"`
	// Provider is null when no MX host was found.
	Provider     *string `json:"provider"`
	Code         int     `json:"code,omitempty"`
	EnhancedCode string  `json:"enhancedCode,omitempty"`
	Message      string  `json:"message,omitempty"`
	TLS          bool    `json:"tls"`
	// CatchAll is the random-address probe's result, when one decided.
	CatchAll string `json:"catchAll,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// NewDecision renders a domain decision in its wire form. The score is
// recomputed from the evidence: stored decisions do not keep it.
func NewDecision(d evs.Decision) Decision {
	c := d.Checks
	mx := c.DNS.MX
	if mx == nil {
		// The contract shows mx as a list, empty rather than null.
		mx = []string{}
	}
	return Decision{
		Email: d.Email, Normalized: d.Normalized, Reason: d.Reason, Score: verify.Score(d), Mode: d.Mode,
		Suggestion: d.Suggestion,
		Flags:      Flags(d.Flags),
		Checks: Checks{
			Syntax: SyntaxCheck(c.Syntax),
			DNS:    DNSCheck{Result: c.DNS.Result, MX: mx, ImplicitMX: c.DNS.ImplicitMX, Rcode: c.DNS.Rcode, Error: c.DNS.Error},
			SMTP: SMTPCheck{Result: c.SMTP.Result, Host: c.SMTP.Host, Provider: optString(c.SMTP.Provider),
				Code: c.SMTP.Code, EnhancedCode: c.SMTP.EnhancedCode, Message: c.SMTP.Message, TLS: c.SMTP.TLS, CatchAll: c.SMTP.CatchAll, Detail: c.SMTP.Detail},
		},
		CheckedAt:  Time{d.CheckedAt},
		DurationMs: d.DurationMs,
		TestMode:   d.TestMode,
		Cached:     d.Cached,
	}
}

// optString is nil for "", else a pointer to s.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Time is a time.Time that marshals as RFC 3339 UTC with milliseconds and a
// Z, as the contract requires for every timestamp.
type Time struct{ time.Time }

// TimeLayout is the contract's timestamp layout.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// MarshalJSON renders t in TimeLayout, in UTC.
func (t Time) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(TimeLayout)+2)
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
		return err
	}
	t.Time = p.UTC()
	return nil
}

// Counters is the "counters" object of the batch envelope.
type Counters struct {
	Total         int `json:"total"`
	Duplicates    int `json:"duplicates"`
	Processed     int `json:"processed"`
	Deliverable   int `json:"deliverable"`
	Undeliverable int `json:"undeliverable"`
	Risky         int `json:"risky"`
	Unknown       int `json:"unknown"`
}
