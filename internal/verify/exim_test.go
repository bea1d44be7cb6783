package verify_test

import (
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
)

// The loopback addresses of the Exim world: one instance, its main
// listener and one listener per ACL that must apply to one domain only.
// (Postfix has 127.0.0.51-55, OpenSMTPD 127.0.0.71-74.)
const (
	eximMain      = "127.0.0.61"
	eximBlocklist = "127.0.0.62"
	eximHelo      = "127.0.0.63"
	eximSender    = "127.0.0.64"
	eximHeloACL   = "127.0.0.65"
)

// eximCases: the replies recorded from Exim 4.96 (Debian
// exim4-daemon-light) with the configuration of TestEngineThroughExim.
var eximCases = []mtaCase{
	{"alice@exim.example", 250, "", "Accepted",
		[]evs.Reason{evs.ReasonAcceptedEmail}, "a local mailbox (a redirect router)"},
	{"nobody@exim.example", 550, "", "Unrouteable address",
		[]evs.Reason{evs.ReasonRejectedEmail}, "Exim's own refusal of an unknown user of a local domain (require verify = recipient)"},
	{"anyone@catchall.exim.example", 250, "", "Accepted",
		[]evs.Reason{evs.ReasonAcceptAll}, "a domain whose router takes any local part"},
	{"alice@callout.exim.example", 250, "", "Accepted",
		[]evs.Reason{evs.ReasonAcceptedEmail}, "the backend accepted the callout"},
	{"nobody@callout.exim.example", 550, "", "Callout verification failed: 550 5.1.1 <nobody@callout.exim.example>: Recipient address rejected: User unknown in virtual mailbox table",
		[]evs.Reason{evs.ReasonRejectedEmail}, "Exim relays the backend's refusal of an unknown user, quoted under its own 550"},
	{"busy@callout.exim.example", 451, "", "Could not complete recipient verify callout",
		[]evs.Reason{evs.ReasonGreylisted}, "the backend deferred the callout: try later"},
	{"alice@grey.exim.example", 451, "", "127.0.0.1 is not yet authorized to deliver mail from <verify@probe.evs.test> to <alice@grey.exim.example>. Please try later.",
		[]evs.Reason{evs.ReasonGreylisted}, "a defer ACL with greylistd's words: try later"},
	{"alice@blocklist.exim.example", 550, "", "127.0.0.1 is listed at zen.spamhaus.org",
		[]evs.Reason{evs.ReasonBlocked}, "a DNSBL deny ACL (Debian's example wording) names our address: about us"},
	{"alice@helo.exim.example", 550, "", "HELO name probe.evs.test refused by local policy",
		[]evs.Reason{evs.ReasonBlocked}, "an ACL refuses our HELO name: about us"},
	{"alice@sender.exim.example", 550, "", "Verification failed for <verify@probe.evs.test> Unrouteable address Sender verify failed",
		[]evs.Reason{evs.ReasonBlocked}, "sender verification (Debian's CHECK_RCPT_VERIFY_SENDER) finds our MAIL FROM domain unroutable: about us, though the words are those of an unknown user"},
	{"alice@heloacl.exim.example", 550, "", "Access denied - Invalid HELO name (See RFC2821 4.1.1.1)",
		[]evs.Reason{evs.ReasonBlocked}, "Exim refuses our name at EHLO, and at HELO: about us"},
	{"anyone@elsewhere.exim.example", 550, "", "relay not permitted",
		[]evs.Reason{evs.ReasonAmbiguousReply}, "Exim does not host the domain: nothing about the mailbox"},
}

// TestEngineThroughExim verifies addresses through the engine against a
// real Exim: local mailboxes, a catch-all domain, a domain Exim checks by
// callout to a backend (a scripted server that words its refusal as
// Postfix does), a defer ACL, and deny ACLs about our address, our HELO
// name and our sender (Exim's sender verification) on listeners of their
// own.
func TestEngineThroughExim(t *testing.T) {
	t.Parallel()
	backend := testkit.StartSMTP(t, testkit.SMTPOptions{Banner: "220 backend.exim.example ESMTP Postfix", Rcpt: func(addr string) string {
		switch {
		case strings.HasPrefix(addr, "alice@"):
			return "250 2.1.5 Ok"
		case strings.HasPrefix(addr, "busy@"):
			return "451 4.3.0 <" + addr + ">: Temporary lookup failure"
		}
		return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown in virtual mailbox table"
	}})
	ex := testkit.StartExim(t, testkit.EximOptions{
		IP:             eximMain,
		Listeners:      []string{eximBlocklist, eximHelo, eximSender, eximHeloACL},
		Mailboxes:      []string{"alice@exim.example", "alice@grey.exim.example", "alice@blocklist.exim.example", "alice@helo.exim.example", "alice@sender.exim.example", "alice@heloacl.exim.example"},
		CatchAll:       []string{"catchall.exim.example"},
		CalloutDomains: []string{"callout.exim.example"},
		CalloutBackend: backend.Addr,
		RcptACL: `  deny    condition = ${if eq{$received_ip_address}{` + eximBlocklist + `}}
          message = $sender_host_address is listed at zen.spamhaus.org
  deny    condition = ${if eq{$received_ip_address}{` + eximHelo + `}}
          condition = ${if eq{$sender_helo_name}{probe.evs.test}}
          message = HELO name $sender_helo_name refused by local policy
  deny    condition = ${if eq{$received_ip_address}{` + eximSender + `}}
          !verify = sender
  defer   domains = grey.exim.example
          message = $sender_host_address is not yet authorized to deliver mail from <$sender_address> to <$local_part@$domain>. Please try later.`,
		// A check many Exim sites copied: at EHLO/HELO, here of our name
		// on one listener.
		HeloACL: `  deny    condition = ${if eq{$received_ip_address}{` + eximHeloACL + `}}
          condition = ${if eq{$sender_helo_name}{probe.evs.test}}
          message = Access denied - Invalid HELO name (See RFC2821 4.1.1.1)`,
	})
	t.Logf("exim started in %v (%s)", ex.Startup, ex.Banner)
	engine := loopbackEngine(t, ex.Port, map[string]string{
		"exim.example": eximMain, "catchall.exim.example": eximMain, "callout.exim.example": eximMain,
		"grey.exim.example": eximMain, "elsewhere.exim.example": eximMain,
		"blocklist.exim.example": eximBlocklist, "helo.exim.example": eximHelo, "sender.exim.example": eximSender,
		"heloacl.exim.example": eximHeloACL,
	})
	begin := time.Now()
	checkMTACases(t, "Exim", engine, eximCases)
	// Exim keeps a callout's answer (two hours for a refusal): verified
	// again, the unknown user is refused from that cache, without the
	// backend's words. A callout also fails when the backend refuses
	// Exim's null sender, so the cached refusal alone says nothing
	// certain about the mailbox.
	checkMTACases(t, "Exim", engine, []mtaCase{
		{"nobody@callout.exim.example", 550, "", "Previous (cached) callout verification failure",
			[]evs.Reason{evs.ReasonAmbiguousReply}, "a callout refused before, from Exim's cache, for a reason it does not give"},
	})
	t.Logf("%d verifications in %v", len(eximCases), time.Since(begin))
}
