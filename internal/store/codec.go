package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// The storage form of a decision, shared by both stores, is compact: a
// batch keeps one per address for 30 days. It is binary (version byte
// binaryV1, then the fields in a fixed order), booleans are bits, strings
// the service writes itself are numbers into an append-only table, and the
// address is not repeated (the result row has it).
//
// jsonDecision is the earlier JSON form, still read.
type jsonDecision struct {
	Normalized *string    `json:"n,omitempty"` // only when it differs from the address
	Reason     evs.Reason `json:"r"`
	Mode       evs.Mode   `json:"m"`
	Suggestion *string    `json:"s,omitempty"`
	Bits       uint16     `json:"b,omitempty"` // setBits's, up to TestMode
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

// binaryV1 opens a binary stored decision; JSON ones open with '{'.
const binaryV1 = 0x01

// Presence bits of a binary decision, after the flag bits.
const (
	hasNormalized = 1 << 0
	hasSuggestion = 1 << 1
	hostIsFirstMX = 1 << 2
	// Fields added later follow the duration, each after the one before,
	// so that decisions stored before them read as they were.
	hasProvider      = 1 << 3
	hasCatchAll      = 1 << 4
	hasHistory       = 1 << 5
	hasDomainHistory = 1 << 6
)

// AppendDecision appends the storage form of d to b. The submitted address
// is not part of it: DecodeDecision gets it back from the result row.
func AppendDecision(b []byte, d evs.Decision) []byte {
	c := d.Checks
	// Bit i is flag i, as setBits reads them (the JSON form's bits too).
	bits := bitsOf(d.Flags.Disposable, d.Flags.Role, d.Flags.Free, d.Flags.AcceptAll, d.Flags.SMTPUTF8,
		c.Syntax.Valid, c.DNS.ImplicitMX, c.SMTP.TLS, d.TestMode, d.Cached)
	host := c.SMTP.Host
	firstMX := host != "" && len(c.DNS.MX) > 0 && host == c.DNS.MX[0]
	if firstMX {
		host = ""
	}
	// In the order of the presence bits.
	has := bitsOf(d.Normalized != d.Email, d.Suggestion != nil, firstMX,
		c.SMTP.Provider != "", c.SMTP.CatchAll != "", c.History != nil, c.DomainHistory != nil)
	b = append(b, binaryV1)
	b = binary.AppendUvarint(b, bits)
	b = binary.AppendUvarint(b, has)
	b = appendStr(b, string(d.Reason))
	b = appendStr(b, string(d.Mode))
	if has&hasNormalized != 0 {
		b = appendStr(b, d.Normalized)
	}
	if has&hasSuggestion != 0 {
		b = appendStr(b, *d.Suggestion)
	}
	b = appendStr(b, c.Syntax.Error)
	b = appendStr(b, c.DNS.Result)
	b = binary.AppendUvarint(b, uint64(len(c.DNS.MX)))
	for _, mx := range c.DNS.MX {
		b = appendStr(b, mx)
	}
	b = appendStr(b, c.DNS.Rcode)
	b = appendStr(b, c.DNS.Error)
	b = appendStr(b, c.SMTP.Result)
	b = appendStr(b, host)
	b = binary.AppendVarint(b, int64(c.SMTP.Code))
	b = appendStr(b, c.SMTP.EnhancedCode)
	b = appendStr(b, c.SMTP.Message)
	b = appendStr(b, c.SMTP.Detail)
	b = binary.AppendVarint(b, unixMs(d.CheckedAt.Time))
	b = binary.AppendVarint(b, d.DurationMs)
	if has&hasProvider != 0 {
		b = appendStr(b, string(c.SMTP.Provider))
	}
	if has&hasCatchAll != 0 {
		b = appendStr(b, c.SMTP.CatchAll)
	}
	if h := c.History; h != nil {
		b = appendStr(b, h.Result)
		b = appendStr(b, string(h.Outcome))
		b = binary.AppendVarint(b, unixMs(h.At.Time))
		b = appendStr(b, h.BounceType)
		b = appendStr(b, h.SMTPReply)
		b = appendStr(b, h.Detail)
	}
	if dh := c.DomainHistory; dh != nil {
		b = appendStr(b, dh.Scope)
		b = binary.AppendUvarint(b, uint64(max(dh.Delivered, 0)))
		b = binary.AppendUvarint(b, uint64(max(dh.HardBounces, 0)))
	}
	return b
}

// bitsOf sets bit i of its result where flags[i] is true.
func bitsOf(flags ...bool) uint64 {
	var bits uint64
	for i, on := range flags {
		if on {
			bits |= 1 << i
		}
	}
	return bits
}

// unixMs is t in Unix milliseconds, 0 for the zero time; timeOf reads it.
func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func timeOf(ms int64) evs.Time {
	if ms == 0 {
		return evs.Time{}
	}
	return evs.Time{Time: time.UnixMilli(ms).UTC()}
}

// setBits sets d's flags from bits, bit i the i-th flag AppendDecision
// gives bitsOf.
func setBits(d *evs.Decision, bits uint64) {
	bit := func(i int) bool { return bits&(1<<i) != 0 }
	d.Flags = evs.Flags{Disposable: bit(0), Role: bit(1), Free: bit(2), AcceptAll: bit(3), SMTPUTF8: bit(4)}
	d.Checks.Syntax.Valid, d.Checks.DNS.ImplicitMX, d.Checks.SMTP.TLS = bit(5), bit(6), bit(7)
	d.TestMode, d.Cached = bit(8), bit(9)
}

// A string is a uvarint v: 0 is "", odd v is entry v>>1 of knownStrings,
// even v is v>>1 bytes of text that follow.
func appendStr(b []byte, s string) []byte {
	if s == "" {
		return append(b, 0)
	}
	if i, ok := knownIndex[s]; ok {
		return binary.AppendUvarint(b, uint64(i)<<1|1)
	}
	b = binary.AppendUvarint(b, uint64(len(s))<<1)
	return append(b, s...)
}

// knownStrings are the strings the service itself writes into decisions.
// Stored decisions refer to them by position: append only, never reorder
// or change an entry.
var knownStrings = []string{
	// reasons
	"accepted_email", "invalid_syntax", "invalid_domain", "no_mail_server", "rejected_email",
	"accept_all", "mailbox_full", "disposable", "greylisted", "smtp_unreachable", "dns_error",
	"timeout", "mailbox_not_checked",
	// modes
	"full", "quick",
	// DNS results and rcodes
	"ok", "nxdomain", "null_mx", "no_records", "error", "not_checked", "mx_not_public",
	"NOERROR", "NXDOMAIN", "SERVFAIL", "REFUSED", "servfail",
	// SMTP results (accept_all, full, greylisted, timeout are above)
	"accepted", "rejected", "unreachable", "skipped",
	// enhanced codes
	"2.0.0", "2.1.0", "2.1.5", "4.2.1", "4.2.2", "4.7.1", "5.1.0", "5.1.1", "5.2.1", "5.2.2", "5.7.1",
	// test mode (the sandbox)
	"test_mode", "mx.sandbox.invalid", "test mode: no network was used",
	"test mode: skipped: invalid syntax", "test mode: skipped: no mail server to probe",
	"OK (test mode)", "No such user (test mode)", "Mailbox full (test mode)",
	"Greylisted, try again later (test mode)", "test mode: no mail host accepted a connection",
	"test mode: no mail host answered in time", "test mode: mailbox not checked",
	"test mode: simulated probe result (quick mode never probes)", "skipped: invalid syntax",
	"OK",
	// providers (smtpprobe.Provider)
	"other", "google", "microsoft365", "outlook", "yahoo", "icloud", "zoho", "yandex", "mailru", "gmx",
	"proton", "fastmail", "proofpoint", "mimecast", "barracuda", "cisco", "trendmicro", "amazonses", "qq", "netease",
	// reasons added later (contract, section 2)
	"blocked", "ambiguous_reply",
	// reported outcomes (contract, section 18): the reason, history
	// results, outcome kinds and bounce types
	"known_bounce", "noted", "delivered", "bounced", "complained", "deferred", "hard", "soft",
	"test mode: a simulated hard bounce", "550 5.1.1 No such user (test mode)",
}

var knownIndex = func() map[string]int {
	m := make(map[string]int, len(knownStrings))
	for i, s := range knownStrings {
		if _, dup := m[s]; dup {
			panic("store: knownStrings repeats " + s)
		}
		m[s] = i
	}
	return m
}()

var errShort = errors.New("store: decode decision: truncated")

// binReader reads a binary decision; the first error sticks.
type binReader struct {
	b   []byte
	err error
}

func (r *binReader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }
func (r *binReader) varint() int64   { return readVarint(r, binary.Varint) }

// readVarint reads one number with read.
func readVarint[T any](r *binReader, read func([]byte) (T, int)) T {
	var v T
	if r.err != nil {
		return v
	}
	v, n := read(r.b)
	if n <= 0 {
		r.err = errShort
		return v
	}
	r.b = r.b[n:]
	return v
}

func (r *binReader) str() string {
	v := r.uvarint()
	switch {
	case r.err != nil || v == 0:
		return ""
	case v&1 == 1:
		if i := v >> 1; i < uint64(len(knownStrings)) {
			return knownStrings[i]
		}
		r.err = fmt.Errorf("store: decode decision: unknown string %d", v>>1)
		return ""
	}
	n := v >> 1
	if n > uint64(len(r.b)) {
		r.err = errShort
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// decodeBinary decodes a binaryV1 decision, b without its version byte.
func decodeBinary(email string, b []byte) (evs.Decision, error) {
	r := binReader{b: b}
	d := evs.Decision{Email: email, Normalized: email}
	setBits(&d, r.uvarint())
	has := r.uvarint()
	d.Reason = evs.Reason(r.str())
	d.Mode = evs.Mode(r.str())
	if has&hasNormalized != 0 {
		d.Normalized = r.str()
	}
	if has&hasSuggestion != 0 {
		s := r.str()
		d.Suggestion = &s
	}
	c := &d.Checks
	c.Syntax.Error = r.str()
	c.DNS.Result = r.str()
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errShort
	}
	c.DNS.MX = make([]string, 0, n)
	for range n {
		if r.err != nil {
			break
		}
		c.DNS.MX = append(c.DNS.MX, r.str())
	}
	c.DNS.Rcode = r.str()
	c.DNS.Error = r.str()
	c.SMTP.Result = r.str()
	c.SMTP.Host = r.str()
	if has&hostIsFirstMX != 0 && len(c.DNS.MX) > 0 {
		c.SMTP.Host = c.DNS.MX[0]
	}
	c.SMTP.Code = int(r.varint())
	c.SMTP.EnhancedCode = r.str()
	c.SMTP.Message = r.str()
	c.SMTP.Detail = r.str()
	d.CheckedAt = timeOf(r.varint())
	d.DurationMs = r.varint()
	if has&hasProvider != 0 {
		c.SMTP.Provider = evs.Provider(r.str())
	}
	if has&hasCatchAll != 0 {
		c.SMTP.CatchAll = r.str()
	}
	if has&hasHistory != 0 {
		h := &evs.HistoryCheck{Result: r.str(), Outcome: evs.OutcomeKind(r.str()), At: timeOf(r.varint())}
		h.BounceType, h.SMTPReply, h.Detail = r.str(), r.str(), r.str()
		c.History = h
	}
	if has&hasDomainHistory != 0 {
		dh := &evs.DomainHistoryCheck{Scope: r.str()}
		dh.Delivered, dh.HardBounces = int(r.uvarint()), int(r.uvarint())
		c.DomainHistory = dh
	}
	if r.err != nil {
		return evs.Decision{}, r.err
	}
	return d, nil
}

// DecodeDecision returns the decision stored as b for the address email.
func DecodeDecision(email string, b []byte) (evs.Decision, error) {
	d, err := decodeDecision(email, b)
	// Not stored: it follows from the SMTP evidence.
	d.Flags.AcceptAllUnknown = d.Checks.SMTP.AcceptAllUnknown()
	return d, err
}

func decodeDecision(email string, b []byte) (evs.Decision, error) {
	if len(b) > 0 && b[0] == binaryV1 {
		return decodeBinary(email, b[1:])
	}
	var s jsonDecision
	if err := json.Unmarshal(b, &s); err != nil {
		return evs.Decision{}, fmt.Errorf("store: decode decision: %w", err)
	}
	d := evs.Decision{
		Email: email, Normalized: email, Reason: s.Reason, Mode: s.Mode, Suggestion: s.Suggestion,
		Checks: evs.Checks{
			Syntax: evs.SyntaxCheck{Error: s.SyntaxErr},
			DNS:    evs.DNSCheck{Result: s.DNSResult, MX: s.MX, Rcode: s.Rcode, Error: s.DNSErr},
			SMTP: evs.SMTPCheck{Result: s.SMTPResult, Host: s.Host, Code: s.Code, EnhancedCode: s.Enhanced,
				Message: s.Message, Detail: s.Detail},
		},
		DurationMs: s.DurationMs,
		CheckedAt:  timeOf(s.CheckedAt),
	}
	setBits(&d, uint64(s.Bits))
	if s.Normalized != nil {
		d.Normalized = *s.Normalized
	}
	if d.Checks.DNS.MX == nil {
		d.Checks.DNS.MX = []string{}
	}
	return d, nil
}
