package app_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// recorder remembers every observation as a line.
type recorder struct{ got []string }

func (r *recorder) HTTPRequest(route string, code int, _ time.Duration) {
	r.got = append(r.got, fmt.Sprint("http ", route, " ", code))
}
func (r *recorder) Verification(mode evs.Mode, status evs.Status, reason evs.Reason) {
	r.got = append(r.got, fmt.Sprint("verdict ", mode, " ", status, " ", reason))
}
func (r *recorder) SMTPReply(class string)              { r.got = append(r.got, "reply "+class) }
func (r *recorder) DNSLookup(time.Duration)             { r.got = append(r.got, "dns") }
func (r *recorder) WebhookDelivery(result string)       { r.got = append(r.got, "webhook "+result) }
func (r *recorder) SMTPConnectionFailure(result string) { r.got = append(r.got, "connfail "+result) }
func (r *recorder) StoreError(source string)            { r.got = append(r.got, "store "+source) }

// fixed is an engine that gives one decision.
type fixed struct{ d evs.Decision }

func (f fixed) Verify(context.Context, verify.Inspection, evs.Mode) evs.Decision { return f.d }
func (f fixed) VerifyDomain(_ context.Context, emails []string, _ evs.Mode) []evs.Decision {
	return []evs.Decision{f.d}
}

// TestCountIsHonest: a test-mode verdict is counted under mode "test" and
// adds nothing to the SMTP series, whatever its made-up evidence says; a
// live verdict counts its RCPT reply class, or, when its SMTP stage got no
// reply at all, one SMTP connection failure.
func TestCountIsHonest(t *testing.T) {
	t.Parallel()
	smtp := func(result string, code int) evs.Checks {
		return evs.Checks{SMTP: evs.SMTPCheck{Result: result, Code: code}}
	}
	cases := []struct {
		name string
		d    evs.Decision
		want []string
	}{
		{"test mode", evs.Decision{TestMode: true, Mode: evs.ModeFull, Reason: evs.ReasonRejectedEmail, Checks: smtp(evs.SMTPRejected, 550)},
			[]string{"verdict test undeliverable rejected_email"}},
		{"test mode unreachable", evs.Decision{TestMode: true, Mode: evs.ModeFull, Reason: evs.ReasonSMTPUnreachable, Checks: smtp(evs.SMTPUnreachable, 0)},
			[]string{"verdict test unknown smtp_unreachable"}},
		{"live reply", evs.Decision{Mode: evs.ModeFull, Reason: evs.ReasonRejectedEmail, Checks: smtp(evs.SMTPRejected, 550)},
			[]string{"verdict full undeliverable rejected_email", "reply 5xx"}},
		{"live, no host took the connection", evs.Decision{Mode: evs.ModeFull, Reason: evs.ReasonSMTPUnreachable, Checks: smtp(evs.SMTPUnreachable, 0)},
			[]string{"verdict full unknown smtp_unreachable", "connfail unreachable"}},
		{"live, timed out before a reply", evs.Decision{Mode: evs.ModeFull, Reason: evs.ReasonTimeout, Checks: smtp(evs.SMTPTimeout, 0)},
			[]string{"verdict full unknown timeout", "connfail timeout"}},
		{"live, blocked with a reply", evs.Decision{Mode: evs.ModeFull, Reason: evs.ReasonSMTPUnreachable, Checks: smtp(evs.SMTPUnreachable, 554)},
			[]string{"verdict full unknown smtp_unreachable", "reply 5xx"}},
		{"live, our SMTP exit down: no verdict, our failure", evs.Decision{Mode: evs.ModeFull, Reason: evs.ReasonSMTPUnreachable,
			Checks: evs.Checks{SMTP: evs.SMTPCheck{Result: evs.SMTPUnreachable, Detail: verify.DetailExitDown}}},
			[]string{"connfail exit"}},
		{"live quick", evs.Decision{Mode: evs.ModeQuick, Reason: evs.ReasonMailboxNotChecked, Checks: smtp(evs.SMTPSkipped, 0)},
			[]string{"verdict quick unknown mailbox_not_checked"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, batch := range []bool{false, true} {
				r := &recorder{}
				e := app.Count(fixed{c.d}, r)
				if batch {
					e.VerifyDomain(context.Background(), []string{"a@x.example"}, c.d.Mode)
				} else {
					e.Verify(context.Background(), verify.Inspect("a@x.example"), c.d.Mode)
				}
				if !reflect.DeepEqual(r.got, c.want) {
					t.Fatalf("batch=%v: observed %q, want %q", batch, r.got, c.want)
				}
			}
		})
	}
}
