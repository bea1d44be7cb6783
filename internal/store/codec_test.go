package store

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

func TestDecisionRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 4, 5, 123_000_000, time.UTC)
	sugg := "bob@gmail.com"
	empty := ""
	tests := []struct {
		name string
		d    evs.Decision
	}{
		{"test mode", evs.Decision{
			Email: "alice@example.com", Normalized: "alice@example.com", Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeQuick,
			Checks: evs.Checks{
				Syntax: evs.SyntaxCheck{Valid: true},
				DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{"mx.sandbox.invalid"}, Rcode: "NOERROR"},
				SMTP: evs.SMTPCheck{Result: evs.SMTPAccepted, Host: "mx.sandbox.invalid", Code: 250, EnhancedCode: "2.1.5",
					Message: "OK (test mode)", TLS: true, Detail: "test mode: simulated probe result (quick mode never probes)"},
			},
			CheckedAt: evs.Time{Time: at}, TestMode: true,
		}},
		{"accepted, random address rejected, provider", evs.Decision{
			Email: "carol@corp.example", Normalized: "carol@corp.example", Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeFull,
			Checks: evs.Checks{
				Syntax: evs.SyntaxCheck{Valid: true},
				DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{"corp-example.mail.protection.outlook.com"}, Rcode: "NOERROR"},
				SMTP: evs.SMTPCheck{Result: evs.SMTPAccepted, Host: "corp-example.mail.protection.outlook.com", Provider: "microsoft365",
					Code: 250, EnhancedCode: "2.1.5", TLS: true, CatchAll: evs.SMTPRejected, Detail: "the server rejects unknown addresses"},
			},
			CheckedAt: evs.Time{Time: at}, DurationMs: 300,
		}},
		{"known bounce, with history", evs.Decision{
			Email: "erin@catchall.example", Normalized: "erin@catchall.example", Reason: evs.ReasonKnownBounce, Mode: evs.ModeFull,
			Flags: evs.Flags{AcceptAll: true},
			Checks: evs.Checks{
				Syntax: evs.SyntaxCheck{Valid: true},
				DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{"mx.catchall.example"}, Rcode: "NOERROR"},
				SMTP:   evs.SMTPCheck{Result: evs.SMTPAcceptAll, Host: "mx.catchall.example", Code: 250, CatchAll: evs.SMTPAccepted, Provider: "other"},
				History: &evs.HistoryCheck{Result: evs.HistoryKnownBounce, Outcome: evs.OutcomeBounced, BounceType: evs.BounceHard,
					At: evs.Time{Time: at.Add(-time.Hour)}, SMTPReply: "550 5.1.1 user unknown — ünïcode", Detail: "hard bounce on 2026-11-22"},
			},
			CheckedAt: evs.Time{Time: at}, DurationMs: 12,
		}},
		{"delivered, history without reply", evs.Decision{
			Email: "fay@catchall.example", Normalized: "fay@catchall.example", Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeQuick,
			Checks: evs.Checks{
				Syntax:  evs.SyntaxCheck{Valid: true},
				DNS:     evs.DNSCheck{Result: evs.DNSOK, MX: []string{}},
				SMTP:    evs.SMTPCheck{Result: evs.SMTPAcceptAll},
				History: &evs.HistoryCheck{Result: evs.HistoryDelivered, Outcome: evs.OutcomeDelivered, At: evs.Time{Time: at}, Detail: "delivered on 2026-11-22"},
			},
			CheckedAt: evs.Time{Time: at},
		}},
		{"accept-all, with the domain's learned counts", evs.Decision{
			Email: "gus@catchall.example", Normalized: "gus@catchall.example", Reason: evs.ReasonAcceptAll, Mode: evs.ModeFull,
			Flags: evs.Flags{AcceptAll: true},
			Checks: evs.Checks{
				Syntax:        evs.SyntaxCheck{Valid: true},
				DNS:           evs.DNSCheck{Result: evs.DNSOK, MX: []string{"mx.catchall.example"}},
				SMTP:          evs.SMTPCheck{Result: evs.SMTPAcceptAll, CatchAll: evs.SMTPAccepted},
				DomainHistory: &evs.DomainHistoryCheck{Scope: evs.DomainScopeShared, DomainCounts: evs.DomainCounts{Delivered: 300, HardBounces: 7}},
			},
			CheckedAt: evs.Time{Time: at},
		}},
		{"unchecked, history and domain counts", evs.Decision{
			Email: "hal@catchall.example", Normalized: "hal@catchall.example", Reason: evs.ReasonMailboxNotChecked, Mode: evs.ModeQuick,
			Checks: evs.Checks{
				Syntax:        evs.SyntaxCheck{Valid: true},
				DNS:           evs.DNSCheck{Result: evs.DNSOK, MX: []string{}},
				SMTP:          evs.SMTPCheck{Result: evs.SMTPSkipped},
				History:       &evs.HistoryCheck{Result: evs.HistoryNoted, Outcome: evs.OutcomeComplained, At: evs.Time{Time: at}, Detail: "complained on 2026-11-22"},
				DomainHistory: &evs.DomainHistoryCheck{Scope: evs.DomainScopeAccount, DomainCounts: evs.DomainCounts{HardBounces: 2}},
			},
			CheckedAt: evs.Time{Time: at},
		}},
		{"reused from the result cache", evs.Decision{
			Email: "dave@corp.example", Normalized: "dave@corp.example", Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeFull,
			Checks: evs.Checks{
				Syntax: evs.SyntaxCheck{Valid: true},
				DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{"mx.corp.example"}, Rcode: "NOERROR"},
				SMTP:   evs.SMTPCheck{Result: evs.SMTPAccepted, Host: "mx.corp.example", Code: 250},
			},
			CheckedAt: evs.Time{Time: at}, DurationMs: 1, Cached: true,
		}},
		{"live, every field", evs.Decision{
			Email: "Bob@Gmial.com", Normalized: "bob@gmial.com", Reason: evs.ReasonRejectedEmail, Mode: evs.ModeFull,
			Suggestion: &sugg,
			Flags:      evs.Flags{Disposable: true, Role: true, Free: true, AcceptAll: true, SMTPUTF8: true},
			Checks: evs.Checks{
				Syntax: evs.SyntaxCheck{Valid: true},
				DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{"a.mx.example", "b.mx.example"}, ImplicitMX: true, Rcode: "NOERROR"},
				SMTP: evs.SMTPCheck{Result: evs.SMTPRejected, Host: "b.mx.example", Code: 550, EnhancedCode: "5.1.1",
					Message: "5.1.1 <bob@gmial.com>: Recipient address rejected: User unknown — ünïcode", Detail: "rcpt refused"},
			},
			CheckedAt: evs.Time{Time: at}, DurationMs: 1234,
		}},
		{"invalid syntax, empty suggestion, no time", evs.Decision{
			Email: "not an address", Normalized: "", Reason: evs.ReasonInvalidSyntax, Mode: evs.ModeFull, Suggestion: &empty,
			Checks: evs.Checks{
				Syntax: evs.SyntaxCheck{Error: "missing_at"},
				DNS:    evs.DNSCheck{Result: evs.DNSNotChecked, MX: []string{}},
				SMTP:   evs.SMTPCheck{Result: evs.SMTPSkipped, Detail: "skipped: invalid syntax"},
			},
		}},
		{"dns error, negative code", evs.Decision{
			Email: "x@y.example", Normalized: "x@y.example", Reason: evs.ReasonDNSError, Mode: evs.ModeQuick,
			Checks: evs.Checks{
				DNS:  evs.DNSCheck{Result: evs.DNSError, MX: []string{}, Rcode: "SERVFAIL", Error: "read udp: i/o timeout"},
				SMTP: evs.SMTPCheck{Code: -1},
			},
			CheckedAt: evs.Time{Time: at}, DurationMs: 20_000,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := AppendDecision(nil, tt.d)
			got, err := DecodeDecision(tt.d.Email, b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.d) {
				t.Fatalf("round trip\n got %+v\nwant %+v", got, tt.d)
			}
		})
	}
}

// TestDecisionTestModeIsSmall: a batch keeps one decision per address for 30
// days; the sandbox's, the same texts every time, must cost a few bytes.
func TestDecisionTestModeIsSmall(t *testing.T) {
	d := evs.Decision{
		Email: "user.1@d1.example", Normalized: "user.1@d1.example", Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeQuick,
		Checks: evs.Checks{
			Syntax: evs.SyntaxCheck{Valid: true},
			DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{"mx.sandbox.invalid"}, Rcode: "NOERROR"},
			SMTP: evs.SMTPCheck{Result: evs.SMTPAccepted, Host: "mx.sandbox.invalid", Code: 250, EnhancedCode: "2.1.5",
				Message: "OK (test mode)", TLS: true, Detail: "test mode: simulated probe result (quick mode never probes)"},
		},
		CheckedAt: evs.Time{Time: time.Now()}, TestMode: true,
	}
	b := AppendDecision(nil, d)
	if len(b) > 32 {
		t.Fatalf("a test-mode decision takes %d bytes, want at most 32", len(b))
	}
}

// TestDecisionReadsJSONForm: decisions stored before the binary form are
// still read.
func TestDecisionReadsJSONForm(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 4, 5, 0, time.UTC)
	old, err := json.Marshal(jsonDecision{
		Reason: evs.ReasonAcceptAll, Mode: evs.ModeFull, Bits: 1<<2 | 1<<3 | 1<<5, // free, accept-all, syntax valid
		DNSResult: evs.DNSOK, MX: []string{"mx.example"}, Rcode: "NOERROR",
		SMTPResult: evs.SMTPAcceptAll, Host: "mx.example", Code: 250, CheckedAt: at.UnixMilli(), DurationMs: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeDecision("a@example.com", old)
	if err != nil {
		t.Fatal(err)
	}
	want := evs.Decision{
		Email: "a@example.com", Normalized: "a@example.com", Reason: evs.ReasonAcceptAll, Mode: evs.ModeFull,
		Flags: evs.Flags{Free: true, AcceptAll: true},
		Checks: evs.Checks{
			Syntax: evs.SyntaxCheck{Valid: true},
			DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{"mx.example"}, Rcode: "NOERROR"},
			SMTP:   evs.SMTPCheck{Result: evs.SMTPAcceptAll, Host: "mx.example", Code: 250},
		},
		CheckedAt: evs.Time{Time: at}, DurationMs: 7,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("JSON form\n got %+v\nwant %+v", got, want)
	}
}

func TestDecisionRefusesDamage(t *testing.T) {
	good := AppendDecision(nil, evs.Decision{Email: "a@b.example", Normalized: "a@b.example", Reason: evs.ReasonTimeout, Mode: evs.ModeFull,
		Checks: evs.Checks{SMTP: evs.SMTPCheck{Message: "a message the table does not know"}}, CheckedAt: evs.Time{Time: time.Now()}})
	for n := 1; n < len(good); n++ {
		if _, err := DecodeDecision("a@b.example", good[:n]); err == nil {
			t.Errorf("decoding the first %d of %d bytes succeeded", n, len(good))
		}
	}
	if _, err := DecodeDecision("a@b.example", []byte{binaryV1, 0, 0, 0xff, 0x7f}); err == nil {
		t.Error("a string index past the table decoded")
	}
}
