package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// The storage form of a decision, shared by both stores. It is not the API's
// wire form: names are short, booleans are bits, the address is not repeated
// (the result row has it) and empty evidence is left out, because a batch
// keeps one of these per address for 30 days.
type storedDecision struct {
	Normalized *string    `json:"n,omitempty"` // only when it differs from the address
	Reason     evs.Reason `json:"r"`
	Mode       evs.Mode   `json:"m"`
	Suggestion *string    `json:"s,omitempty"`
	Bits       uint16     `json:"b,omitempty"`
	SyntaxErr  string     `json:"se,omitempty"`
	DNSResult  string     `json:"dr,omitempty"`
	MX         []string   `json:"mx,omitempty"`
	Rcode      string     `json:"rc,omitempty"`
	DNSErr     string     `json:"de,omitempty"`
	SMTPResult string     `json:"sr,omitempty"`
	Host       string     `json:"h,omitempty"`
	Code       int        `json:"c,omitempty"`
	Enhanced   string     `json:"x,omitempty"`
	Message    string     `json:"t,omitempty"`
	Detail     string     `json:"d,omitempty"`
	CheckedAt  int64      `json:"at,omitempty"` // Unix milliseconds
	DurationMs int64      `json:"ms,omitempty"`
}

// Bits of storedDecision.Bits.
const (
	bitDisposable = 1 << iota
	bitRole
	bitFree
	bitAcceptAll
	bitSMTPUTF8
	bitSyntaxValid
	bitImplicitMX
	bitTLS
	bitTestMode
)

// EncodeDecision returns the storage form of d. The submitted address is not
// part of it: DecodeDecision gets it back from the result row.
func EncodeDecision(d evs.Decision) ([]byte, error) {
	c := d.Checks
	s := storedDecision{
		Reason: d.Reason, Mode: d.Mode, Suggestion: d.Suggestion,
		SyntaxErr: c.Syntax.Error,
		DNSResult: c.DNS.Result, MX: c.DNS.MX, Rcode: c.DNS.Rcode, DNSErr: c.DNS.Error,
		SMTPResult: c.SMTP.Result, Host: c.SMTP.Host, Code: c.SMTP.Code, Enhanced: c.SMTP.EnhancedCode,
		Message: c.SMTP.Message, Detail: c.SMTP.Detail,
		DurationMs: d.DurationMs,
	}
	if d.Normalized != d.Email {
		s.Normalized = &d.Normalized
	}
	if !d.CheckedAt.IsZero() {
		s.CheckedAt = d.CheckedAt.UnixMilli()
	}
	for _, f := range []struct {
		on  bool
		bit uint16
	}{
		{d.Flags.Disposable, bitDisposable}, {d.Flags.Role, bitRole}, {d.Flags.Free, bitFree},
		{d.Flags.AcceptAll, bitAcceptAll}, {d.Flags.SMTPUTF8, bitSMTPUTF8},
		{c.Syntax.Valid, bitSyntaxValid}, {c.DNS.ImplicitMX, bitImplicitMX}, {c.SMTP.TLS, bitTLS},
		{d.TestMode, bitTestMode},
	} {
		if f.on {
			s.Bits |= f.bit
		}
	}
	return json.Marshal(s)
}

// DecodeDecision returns the decision stored as b for the address email.
func DecodeDecision(email string, b []byte) (evs.Decision, error) {
	var s storedDecision
	if err := json.Unmarshal(b, &s); err != nil {
		return evs.Decision{}, fmt.Errorf("store: decode decision: %w", err)
	}
	has := func(bit uint16) bool { return s.Bits&bit != 0 }
	d := evs.Decision{
		Email: email, Normalized: email, Reason: s.Reason, Mode: s.Mode, Suggestion: s.Suggestion,
		Flags: evs.Flags{
			Disposable: has(bitDisposable), Role: has(bitRole), Free: has(bitFree),
			AcceptAll: has(bitAcceptAll), SMTPUTF8: has(bitSMTPUTF8),
		},
		Checks: evs.Checks{
			Syntax: evs.SyntaxCheck{Valid: has(bitSyntaxValid), Error: s.SyntaxErr},
			DNS:    evs.DNSCheck{Result: s.DNSResult, MX: s.MX, ImplicitMX: has(bitImplicitMX), Rcode: s.Rcode, Error: s.DNSErr},
			SMTP: evs.SMTPCheck{Result: s.SMTPResult, Host: s.Host, Code: s.Code, EnhancedCode: s.Enhanced,
				Message: s.Message, TLS: has(bitTLS), Detail: s.Detail},
		},
		DurationMs: s.DurationMs,
		TestMode:   has(bitTestMode),
	}
	if s.Normalized != nil {
		d.Normalized = *s.Normalized
	}
	if d.Checks.DNS.MX == nil {
		d.Checks.DNS.MX = []string{}
	}
	if s.CheckedAt != 0 {
		d.CheckedAt = time.UnixMilli(s.CheckedAt).UTC()
	}
	return d, nil
}
