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

// TestReplyTextDecidesReason: the text of a RCPT reply, not a
// mailbox-looking code, decides the reason: a refusal of our prober is
// never rejected_email, and text about the recipient's account is, unless
// the code speaks of our sender, or other words of the reply speak of us or
// of a block.
func TestReplyTextDecidesReason(t *testing.T) {
	t.Parallel()
	replies := rcptTable(map[string]string{
		"spf":     "550 5.1.0 192.0.2.222 is not allowed to send from <probe.evs.test> per it's SPF Record",
		"dnsbl":   "550-5.1.1 Service unavailable; client host [127.0.0.1]\n550 5.1.1 blocked using zen.spamhaus.org",
		"dbeb":    "550 5.4.1 Recipient address rejected: Access denied. AS(201806281) [DB5EUR03FT012.eop-EUR03.prod.protection.outlook.com]",
		"yandex":  "550 5.7.1 No such user!",
		"blocked": "550 5.7.1 Recipient address blocked",
		"frozen":  "554 Le compte du destinataire est bloque. The recipient account is blocked.",
		"unknown": "550 Пользователь не найден",
		// A filter named only by itself, a spent quota of ours, a full
		// mailbox in words under a 4xx (docs/replies.md).
		"senderbase": "554 Rejected by SenderBase",
		"ipcheck":    "550 Blocked - see https://ipcheck.proofpoint.com/?ip=203.0.113.5",
		"relayquota": "550 5.4.6 Daily relay quota exceeded",
		"unauth":     "550 Unauthenticated senders are not accepted",
		"fullq":      "452 Mailbox exceeds quota",
		"vendorfoot": "550 5.1.1 User unknown. Protected by Proofpoint",
	}, "250 2.1.5 Ok")
	w := newWorld(t, []mta{
		{ip: "127.0.5.1", opts: testkit.SMTPOptions{Rcpt: replies}},
		{ip: "127.0.5.2", opts: testkit.SMTPOptions{Rcpt: replies}},
	}, []string{
		"corp.example. 300 IN MX 10 mx.corp.example.",
		"mx.corp.example. 300 IN A 127.0.5.1",
		"yandex.example. 300 IN MX 10 mx.yandex.net.",
		"mx.yandex.net. 300 IN A 127.0.5.2",
	}, time.Second)
	cases := []struct {
		email, provider string
		want            evs.Reason
	}{
		{"spf@corp.example", "other", evs.ReasonBlocked},
		{"dnsbl@corp.example", "other", evs.ReasonBlocked},
		// The reply's own fingerprint names Microsoft 365.
		{"dbeb@corp.example", "microsoft365", evs.ReasonRejectedEmail},
		// Yandex's 5.7.1 "No such user!" is Yandex's unknown user; from
		// any other host the explicit words outrank the policy code that
		// many servers put on every refusal.
		{"yandex@yandex.example", "yandex", evs.ReasonRejectedEmail},
		{"yandex@corp.example", "other", evs.ReasonRejectedEmail},
		// A mailbox "blocked" under a policy code may be blocked for us.
		{"blocked@corp.example", "other", evs.ReasonAmbiguousReply},
		{"frozen@corp.example", "other", evs.ReasonRejectedEmail},
		{"unknown@corp.example", "other", evs.ReasonRejectedEmail},
		{"senderbase@corp.example", "other", evs.ReasonBlocked},
		{"ipcheck@corp.example", "other", evs.ReasonBlocked},
		{"relayquota@corp.example", "other", evs.ReasonBlocked},
		{"unauth@corp.example", "other", evs.ReasonBlocked},
		{"fullq@corp.example", "other", evs.ReasonMailboxFull},
		{"vendorfoot@corp.example", "other", evs.ReasonRejectedEmail},
	}
	for _, c := range cases {
		t.Run(c.email, func(t *testing.T) {
			d := w.engine.Verify(context.Background(), verify.Inspect(c.email), evs.ModeFull)
			if d.Reason != c.want || string(d.Checks.SMTP.Provider) != c.provider {
				t.Fatalf("got %s from %q (%s: %d %s %q, %s), want %s from %q", d.Reason, d.Checks.SMTP.Provider, d.Checks.SMTP.Result,
					d.Checks.SMTP.Code, d.Checks.SMTP.EnhancedCode, d.Checks.SMTP.Message, d.Checks.SMTP.Detail, c.want, c.provider)
			}
			if !strings.Contains(d.Checks.SMTP.Detail, "(rule ") {
				t.Fatalf("detail %q does not name the rule that decided", d.Checks.SMTP.Detail)
			}
		})
	}
}
