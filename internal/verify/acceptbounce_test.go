package verify_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// TestAcceptThenBounceReceivers: behind a security gateway or at Yahoo a
// 250 at RCPT is not proof of delivery. Real DNS and SMTP peers on
// loopback answer as such receivers do.
func TestAcceptThenBounceReceivers(t *testing.T) {
	t.Parallel()
	greyRandom := rcptTable(map[string]string{
		"alice":           "250 2.1.5 Ok",
		"nobody":          "550 5.1.1 User Unknown",
		"zz-random-probe": "451 4.7.1 Try again later",
	}, "250 2.1.5 Ok")
	verifying := rcptTable(map[string]string{
		"alice":           "250 2.1.5 Ok",
		"zz-random-probe": "550 5.1.1 User Unknown",
	}, "550 5.1.1 User Unknown")
	w := newWorld(t, []mta{
		{ip: "127.0.4.1", opts: testkit.SMTPOptions{Rcpt: greyRandom}},
		{ip: "127.0.4.2", opts: testkit.SMTPOptions{Rcpt: verifying}},
		{ip: "127.0.4.3", opts: testkit.SMTPOptions{Rcpt: verifying}},
		{ip: "127.0.4.4", opts: testkit.SMTPOptions{Rcpt: greyRandom}},
		{ip: "127.0.4.5", opts: testkit.SMTPOptions{Rcpt: greyRandom}},
	}, []string{
		"pp-open.example. 300 IN MX 10 mx0a-00112233.pphosted.com.",
		"mx0a-00112233.pphosted.com. 300 IN A 127.0.4.1",
		"pp-verify.example. 300 IN MX 10 mx0b-00445566.pphosted.com.",
		"mx0b-00445566.pphosted.com. 300 IN A 127.0.4.2",
		"yahoo.example. 300 IN MX 1 mta5.am0.yahoodns.net.",
		"mta5.am0.yahoodns.net. 300 IN A 127.0.4.3",
		"plain.example. 300 IN MX 10 mx.plain.example.",
		"mx.plain.example. 300 IN A 127.0.4.4",
		"mimecast.example. 300 IN MX 10 eu-smtp-inbound-1.mimecast.com.",
		"eu-smtp-inbound-1.mimecast.com. 300 IN A 127.0.4.5",
		// A look-alike name that only ends in the same letters.
		"lookalike.example. 300 IN MX 10 mx.notpphosted.com.",
		"mx.notpphosted.com. 300 IN A 127.0.4.4",
	}, time.Second)

	cases := []struct {
		email     string
		reason    evs.Reason
		smtp      string
		acceptAll bool
		detail    string
	}{
		// The gateway took the address and could not be shown to verify.
		{"alice@pp-open.example", evs.ReasonAcceptAll, "accept_all", true, "Proofpoint"},
		{"alice@mimecast.example", evs.ReasonAcceptAll, "accept_all", true, "Mimecast"},
		// The gateway rejected the random address: verification is on.
		{"alice@pp-verify.example", evs.ReasonAcceptedEmail, "accepted", false, "rejects unknown addresses"},
		// Yahoo's 250 is never proof, even when the random address failed.
		{"alice@yahoo.example", evs.ReasonAcceptAll, "accept_all", true, "Yahoo"},
		// A rejection stays a rejection behind a gateway.
		{"nobody@pp-open.example", evs.ReasonRejectedEmail, "rejected", false, "rejected"},
		// Elsewhere an inconclusive random probe leaves the 250 as the
		// evidence, but it is not proof: risky, accept_all, and the flag
		// does not claim a catch-all that was not seen.
		{"alice@plain.example", evs.ReasonAcceptAll, "accepted", false, "inconclusive (greylisted)"},
		{"alice@lookalike.example", evs.ReasonAcceptAll, "accepted", false, "inconclusive (greylisted)"},
	}
	for _, c := range cases {
		t.Run(c.email, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			d := w.engine.Verify(ctx, verify.Inspect(c.email), evs.ModeFull)
			if d.Reason != c.reason || d.Checks.SMTP.Result != c.smtp || d.Flags.AcceptAll != c.acceptAll {
				t.Fatalf("got %s smtp=%s acceptAll=%v (%s), want %s smtp=%s acceptAll=%v",
					d.Reason, d.Checks.SMTP.Result, d.Flags.AcceptAll, d.Checks.SMTP.Detail, c.reason, c.smtp, c.acceptAll)
			}
			if !strings.Contains(d.Checks.SMTP.Detail, c.detail) {
				t.Fatalf("detail %q does not say %q", d.Checks.SMTP.Detail, c.detail)
			}
		})
	}
}
