package api_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
)

// The hand-written encoder must write what encoding/json writes for the
// same value, byte for byte: the struct tags stay the definition.
func TestDecisionAppendJSONMatchesEncodingJSON(t *testing.T) {
	sugg := "gmail.com"
	odd := "a\"b\\c<d>&e\u2028f\u2029g\x00\x1f\b\f\n\r\t\x7f h\xff\xfei é 日本"
	tests := []struct {
		name string
		d    evs.Decision
	}{
		{"zero", evs.Decision{}},
		{"quick deliverable", evs.Decision{
			Email: "alice@example.com", Normalized: "alice@example.com", Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeQuick,
			Checks:    evs.Checks{Syntax: evs.SyntaxCheck{Valid: true}, DNS: evs.DNSCheck{Result: "found", MX: []string{"mx1.example.com", "mx2.example.com"}}, SMTP: evs.SMTPCheck{Result: "not_checked"}},
			CheckedAt: time.Date(2026, 11, 23, 16, 20, 1, 123456789, time.FixedZone("x", 3600)), DurationMs: 12, TestMode: true,
		}},
		{"every field", evs.Decision{
			Email: odd, Normalized: odd, Reason: evs.Reason(odd), Mode: evs.ModeFull, Suggestion: &sugg,
			Flags: evs.Flags{Disposable: true, Role: true, Free: true, AcceptAll: true, SMTPUTF8: true},
			Checks: evs.Checks{
				Syntax: evs.SyntaxCheck{Valid: false, Error: "consecutive_dots"},
				DNS:    evs.DNSCheck{Result: "nxdomain", MX: []string{}, ImplicitMX: true, Rcode: "NXDOMAIN", Error: odd},
				SMTP:   evs.SMTPCheck{Result: "rejected", Host: "mx.example.com", Code: 550, EnhancedCode: "5.1.1", Message: odd, TLS: true, Detail: "x"},
			},
			CheckedAt: time.Unix(0, 0), DurationMs: -3,
		}},
		{"empty suggestion", evs.Decision{Suggestion: new(string), Checks: evs.Checks{DNS: evs.DNSCheck{MX: []string{""}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkSameJSON(t, api.NewDecision(tt.d))
		})
	}
}

func checkSameJSON(t *testing.T, d api.Decision) {
	t.Helper()
	want, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	got := d.AppendJSON([]byte("prefix"))
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatalf("AppendJSON dropped what b held: %q", got)
	}
	if got = got[len("prefix"):]; !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON\n got %s\nwant %s", got, want)
	}
}

func FuzzDecisionAppendJSON(f *testing.F) {
	f.Add("alice@example.com", "mx.example.com", "550 5.1.1 <alice@example.com>: unknown", 550, int64(1700000000123), true)
	f.Add("\xff\u2028<&>\"\\\x01", "", "", 0, int64(-1), false)
	f.Fuzz(func(t *testing.T, email, host, msg string, code int, ms int64, flag bool) {
		d := evs.Decision{
			Email: email, Normalized: email, Reason: evs.Reason(msg), Mode: evs.Mode(host),
			Flags:  evs.Flags{Disposable: flag, Free: !flag},
			Checks: evs.Checks{Syntax: evs.SyntaxCheck{Valid: flag, Error: msg}, DNS: evs.DNSCheck{Result: host, MX: []string{host, email}, Rcode: msg}, SMTP: evs.SMTPCheck{Result: msg, Host: host, Code: code, Message: msg, Detail: email}},
			// Years outside 0000–9999 are not the contract's timestamps.
			CheckedAt: time.UnixMilli(ms % 253402300799000), DurationMs: ms, TestMode: flag,
		}
		if flag {
			d.Suggestion = &host
		}
		checkSameJSON(t, api.NewDecision(d))
	})
}
