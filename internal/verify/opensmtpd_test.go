package verify_test

import (
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
)

// The loopback addresses of the OpenSMTPD world: one instance, its main
// listener and one listener per filter that must apply to one domain only.
const (
	smtpdMain      = "127.0.0.71"
	smtpdBlockRcpt = "127.0.0.72"
	smtpdBlockConn = "127.0.0.73"
	smtpdHelo      = "127.0.0.74"
)

// opensmtpdCases: the replies recorded from OpenSMTPD 6.8.0p2 (Debian
// opensmtpd) with the configuration of TestEngineThroughOpenSMTPD. The
// refusals about us and the defer are builtin filters of OpenSMTPD with
// words of ours; OpenSMTPD has no greylisting or DNSBL of its own.
var opensmtpdCases = []mtaCase{
	{"alice@virt.smtpd.example", 250, "2.1.5", "Destination address valid: Recipient ok",
		[]evs.Reason{evs.ReasonAcceptedEmail}, "a user of a virtual table"},
	{"nobody@virt.smtpd.example", 524, "5.2.4", "Mailing list expansion problem: <nobody@virt.smtpd.example>",
		[]evs.Reason{evs.ReasonRejectedEmail}, "OpenSMTPD's refusal of an address its virtual table does not have: the domain's rule matched, the recipient expanded to nothing"},
	{"alice@rcpt.smtpd.example", 250, "2.1.5", "Destination address valid: Recipient ok",
		[]evs.Reason{evs.ReasonAcceptedEmail}, "a recipient of a rule's rcpt-to table"},
	{"nobody@rcpt.smtpd.example", 550, "", "Invalid recipient: <nobody@rcpt.smtpd.example>",
		[]evs.Reason{evs.ReasonRejectedEmail}, "no rule matches an address the rcpt-to table lacks, on the domain's own MX: OpenSMTPD's word for an unknown user"},
	{"anyone@catchall.smtpd.example", 250, "2.1.5", "Destination address valid: Recipient ok",
		[]evs.Reason{evs.ReasonAcceptAll}, "a virtual table with a catch-all (@domain) entry"},
	{"alice@grey.smtpd.example", 451, "4.7.1", "Greylisted, please try again later",
		[]evs.Reason{evs.ReasonGreylisted}, "a filter defers the recipient: try later"},
	{"alice@blockrcpt.smtpd.example", 550, "5.7.1", "Service unavailable; client [127.0.0.1] blocked using zen.spamhaus.org",
		[]evs.Reason{evs.ReasonBlocked}, "a filter refuses our address at RCPT: about us"},
	{"alice@blockconn.smtpd.example", 554, "5.7.1", "Service unavailable; client [127.0.0.1] blocked using zen.spamhaus.org",
		[]evs.Reason{evs.ReasonBlocked}, "a filter refuses our address at connect: the banner is the refusal"},
	{"alice@helo.smtpd.example", 550, "5.7.1", "HELO name probe.evs.test refused by local policy",
		[]evs.Reason{evs.ReasonBlocked}, "a filter refuses our HELO name, at EHLO and at HELO: about us"},
}

// TestEngineThroughOpenSMTPD verifies addresses through the engine against
// a real OpenSMTPD: a virtual domain, a domain whose rule takes only the
// recipients of a table, a catch-all, and builtin filters that defer a
// recipient or refuse our address (at RCPT and at connect) or our HELO
// name, on listeners of their own.
func TestEngineThroughOpenSMTPD(t *testing.T) {
	t.Parallel()
	s := testkit.StartOpenSMTPD(t, testkit.OpenSMTPDOptions{
		IP:     smtpdMain,
		Filter: "greylist",
		Listeners: []testkit.OpenSMTPDListener{
			{IP: smtpdBlockRcpt, Filter: "dnsbl-rcpt"},
			{IP: smtpdBlockConn, Filter: "dnsbl-connect"},
			{IP: smtpdHelo, Filter: "helo"},
		},
		Tables: map[string][]string{
			// The delivery user, mail, exists on every Debian system;
			// nothing is delivered.
			"virtuals": {
				"alice@virt.smtpd.example mail", "alice@rcpt.smtpd.example mail", "@catchall.smtpd.example mail",
				"alice@grey.smtpd.example mail", "alice@blockrcpt.smtpd.example mail", "alice@blockconn.smtpd.example mail",
				"alice@helo.smtpd.example mail",
			},
			"recipients": {"alice@rcpt.smtpd.example"},
			"us":         {"127.0.0.1"},
			"ourhelo":    {"probe.evs.test"},
			"grey":       {"alice@grey.smtpd.example"},
		},
		Filters: []string{
			`filter "greylist" phase rcpt-to match rcpt-to <grey> reject "451 4.7.1 Greylisted, please try again later"`,
			`filter "dnsbl-rcpt" phase rcpt-to match src <us> reject "550 5.7.1 Service unavailable; client [127.0.0.1] blocked using zen.spamhaus.org"`,
			`filter "dnsbl-connect" phase connect match src <us> disconnect "554 5.7.1 Service unavailable; client [127.0.0.1] blocked using zen.spamhaus.org"`,
			`filter "ehlo" phase ehlo match helo <ourhelo> reject "550 5.7.1 HELO name probe.evs.test refused by local policy"`,
			`filter "helo-only" phase helo match helo <ourhelo> reject "550 5.7.1 HELO name probe.evs.test refused by local policy"`,
			`filter "helo" chain { "ehlo", "helo-only" }`,
		},
		Rules: []string{
			`action "deliver" maildir virtual <virtuals>`,
			`match from any for domain "rcpt.smtpd.example" rcpt-to <recipients> action "deliver"`,
			`match from any for domain "virt.smtpd.example" action "deliver"`,
			`match from any for domain "catchall.smtpd.example" action "deliver"`,
			`match from any for domain "grey.smtpd.example" action "deliver"`,
			`match from any for domain "blockrcpt.smtpd.example" action "deliver"`,
			`match from any for domain "blockconn.smtpd.example" action "deliver"`,
			`match from any for domain "helo.smtpd.example" action "deliver"`,
		},
	})
	t.Logf("opensmtpd started in %v (%s)", s.Startup, s.Banner)
	engine := loopbackEngine(t, s.Port, map[string]string{
		"virt.smtpd.example": smtpdMain, "rcpt.smtpd.example": smtpdMain, "catchall.smtpd.example": smtpdMain,
		"grey.smtpd.example": smtpdMain, "blockrcpt.smtpd.example": smtpdBlockRcpt,
		"blockconn.smtpd.example": smtpdBlockConn, "helo.smtpd.example": smtpdHelo,
	})
	begin := time.Now()
	checkMTACases(t, "OpenSMTPD", engine, opensmtpdCases)
	t.Logf("%d verifications in %v", len(opensmtpdCases), time.Since(begin))
}
