package verify_test

import (
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestReplyTextDecidesReason: the text of a RCPT reply, not a
// mailbox-looking code, decides the reason: a refusal of our prober is
// never rejected_email, and text about the recipient's account is, whatever
// the code.
func TestReplyTextDecidesReason(t *testing.T) {
	replies := rcptTable(map[string]string{
		"spf":     "550 5.1.0 192.0.2.222 is not allowed to send from <probe.evs.test> per it's SPF Record",
		"dnsbl":   "550-5.1.1 Service unavailable; client host [127.0.0.1]\n550 5.1.1 blocked using zen.spamhaus.org",
		"dbeb":    "550 5.4.1 Recipient address rejected: Access denied. AS(201806281) [DB5EUR03FT012.eop-EUR03.prod.protection.outlook.com]",
		"yandex":  "550 5.7.1 No such user!",
		"frozen":  "554 Le compte du destinataire est bloque. The recipient account is blocked.",
		"unknown": "550 Пользователь не найден",
	}, "250 2.1.5 Ok")
	w := newWorld(t, []mta{{ip: "127.0.5.1", opts: testkit.SMTPOptions{Rcpt: replies}}}, []string{
		"corp.example. 300 IN MX 10 mx.corp.example.",
		"mx.corp.example. 300 IN A 127.0.5.1",
	}, time.Second)
	cases := map[string]evs.Reason{
		"spf":     evs.ReasonSMTPUnreachable,
		"dnsbl":   evs.ReasonSMTPUnreachable,
		"dbeb":    evs.ReasonRejectedEmail,
		"yandex":  evs.ReasonRejectedEmail,
		"frozen":  evs.ReasonRejectedEmail,
		"unknown": evs.ReasonRejectedEmail,
	}
	for local, want := range cases {
		t.Run(local, func(t *testing.T) {
			d := w.engine.Verify(context.Background(), local+"@corp.example", evs.ModeFull)
			if d.Reason != want {
				t.Fatalf("%s: got %s (%s: %d %s %q), want %s", local, d.Reason, d.Checks.SMTP.Result, d.Checks.SMTP.Code, d.Checks.SMTP.EnhancedCode, d.Checks.SMTP.Message, want)
			}
		})
	}
}
