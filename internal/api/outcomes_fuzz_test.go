package api_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// FuzzParseOutcomes: whatever the body, the parser either refuses it with
// an invalid_request error whose message is valid UTF-8 and echoes no
// long run of the body, or returns between 1 and MaxOutcomes outcomes each
// of which is valid: a normalised address that normalises to itself, a
// known kind, a bounce type only on a bounce, a millisecond UTC time not
// after now plus an hour, a reply of at most 200 characters. A JSON
// body and the same outcomes as CSV parse alike.
func FuzzParseOutcomes(f *testing.F) {
	f.Add([]byte(`{"outcomes":[{"email":"bob@good.example","outcome":"bounced","bounceType":"hard","at":"2026-11-20T10:00:00Z","smtpReply":"550 5.1.1 no"}]}`), true)
	f.Add([]byte(`{"outcomes":[{"email":"a@b.example","outcome":"delivered","at":"2026-11-20T10:00:00.123456+02:00","bounceType":null}]}`), true)
	f.Add([]byte("email,outcome,at,bounceType,smtpReply\nbob@good.example,bounced,2026-11-20T10:00:00Z,soft,\"452, full\"\n"), false)
	f.Add([]byte("\xef\xbb\xbfEMAIL,AT,OUTCOME\r\nbob@good.example,2026-11-20T10:00:00Z,complained\r\n\r\n"), false)
	f.Add([]byte("email,outcome,at\n\"bob\"\"@x\",deferred,2026-11-20T10:00:00Z\n"), false)
	f.Add([]byte(`{"outcomes":[{"email":"x@y.example","outcome":"delivered","at":"2026-11-20T10:00:00Z","bounceType":"hard"}]}`), true)
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool) {
		mt := "text/csv"
		if asJSON {
			mt = "application/json"
		}
		os, err := api.ParseOutcomes(mt, body, now)
		if err != nil {
			if evs.ErrorCode(err) != evs.CodeInvalidRequest {
				t.Fatalf("error %v is not invalid_request", err)
			}
			msg := evs.ErrorMessage(err)
			if !utf8.ValidString(msg) || len(msg) > 400 {
				t.Fatalf("message %q: not UTF-8 or too long", msg)
			}
			return
		}
		if len(os) == 0 || len(os) > api.MaxOutcomes {
			t.Fatalf("%d outcomes", len(os))
		}
		for i, o := range os {
			if key, _, ok := verify.NormalizedKey(o.Address); !ok || key != o.Address {
				t.Fatalf("outcome %d: address %q is not normalised (%q, %v)", i, o.Address, key, ok)
			}
			switch o.Kind {
			case evs.OutcomeDelivered, evs.OutcomeComplained, evs.OutcomeDeferred:
				if o.BounceType != "" {
					t.Fatalf("outcome %d: bounce type on %s", i, o.Kind)
				}
			case evs.OutcomeBounced:
				if o.BounceType != "" && o.BounceType != evs.BounceHard && o.BounceType != evs.BounceSoft {
					t.Fatalf("outcome %d: bounce type %q", i, o.BounceType)
				}
			default:
				t.Fatalf("outcome %d: kind %q", i, o.Kind)
			}
			if o.At.Location() != time.UTC || !o.At.Equal(o.At.Truncate(time.Millisecond)) || o.At.After(now.Add(time.Hour)) {
				t.Fatalf("outcome %d: time %v", i, o.At)
			}
			if utf8.RuneCountInString(o.SMTPReply) > 200 || !utf8.ValidString(o.SMTPReply) {
				t.Fatalf("outcome %d: reply %q", i, o.SMTPReply)
			}
			if o.Verdict != "" {
				t.Fatalf("outcome %d: a verdict from the parser", i)
			}
		}
		if !asJSON {
			return
		}
		// The same outcomes as CSV parse to the same.
		var b strings.Builder
		b.WriteString("email,outcome,at,bounceType,smtpReply\n")
		for _, o := range os {
			row := []string{o.Address, string(o.Kind), o.At.Format(time.RFC3339Nano), o.BounceType, o.SMTPReply}
			for i, v := range row {
				if i > 0 {
					b.WriteByte(',')
				}
				// A quoted CSV field needs only its quotes doubled.
				b.WriteString(`"` + strings.ReplaceAll(v, `"`, `""`) + `"`)
			}
			b.WriteByte('\n')
		}
		again, err := api.ParseOutcomes("text/csv", []byte(b.String()), now)
		if err != nil {
			t.Fatalf("the outcomes as CSV: %v\n%s", err, b.String())
		}
		if len(again) != len(os) {
			t.Fatalf("CSV gave %d outcomes, JSON %d", len(again), len(os))
		}
		for i := range os {
			if again[i] != os[i] {
				t.Fatalf("outcome %d: CSV %+v, JSON %+v", i, again[i], os[i])
			}
		}
	})
}
