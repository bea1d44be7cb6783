package smtpprobe

import (
	"bufio"
	"strings"
	"testing"
)

// parse reads a wire reply ("550-5.1.1 a\r\n550 5.1.1 b\r\n") the way a
// session does, so the table exercises parsing and classification together.
func parse(t *testing.T, wire string) Reply {
	t.Helper()
	wire = strings.ReplaceAll(strings.TrimRight(wire, "\n"), "\n", "\r\n") + "\r\n"
	rr, err := readReply(bufio.NewReader(strings.NewReader(wire)))
	if err != nil {
		t.Fatalf("readReply(%q): %v", wire, err)
	}
	return rr.reply()
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name  string
		stage string
		wire  string
		want  Class
	}{
		// Accepted.
		{"postfix ok", StageRcpt, "250 2.1.5 Ok", Accepted},
		{"gmail ok", StageRcpt, "250 2.1.5 OK a640c23a62f3a-abc.123 - gsmtp", Accepted},
		{"no enhanced", StageRcpt, "250 Accepted", Accepted},
		{"251 forwarded", StageRcpt, "251 2.1.5 User not local; will forward", Accepted},

		// Rejected: the mailbox does not exist or is disabled.
		{"gmail no such user", StageRcpt, "550-5.1.1 The email account that you tried to reach does not exist. Please try\n550-5.1.1 double-checking the recipient's email address for typos or\n550-5.1.1 unnecessary spaces. For more information, go to\n550 5.1.1  https://support.google.com/mail/?p=NoSuchUser a1si123 - gsmtp", Rejected},
		{"gmail disabled", StageRcpt, "550-5.2.1 The email account that you tried to reach is disabled. Learn more at\n550 5.2.1  https://support.google.com/mail/?p=DisabledUser z1si - gsmtp", Rejected},
		{"outlook mailbox unavailable", StageRcpt, "550 5.5.0 Requested action not taken: mailbox unavailable (S2017062302). [AM4PEPF00027A6C.eurprd04.prod.outlook.com]", Rejected},
		{"outlook recipient not found", StageRcpt, "550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup", Rejected},
		{"exchange online dbeb", StageRcpt, "550 5.4.1 Recipient address rejected: Access denied. AS(201806281) [DB5EUR03FT012.eop-EUR03.prod.protection.outlook.com]", Rejected},
		{"yahoo no account", StageRcpt, "554 delivery error: dd This user doesn't have a yahoo.com account (x@yahoo.com) [0] - mta1234.mail.gq1.yahoo.com", Rejected},
		{"postfix virtual", StageRcpt, "550 5.1.1 <x@y.example>: Recipient address rejected: User unknown in virtual mailbox table", Rejected},
		{"postfix local", StageRcpt, "550 5.1.1 <x@y.example>: Recipient address rejected: User unknown in local recipient table", Rejected},
		{"exim unrouteable", StageRcpt, "550 Unrouteable address", Rejected},
		{"exim no such user", StageRcpt, "550 No Such User Here", Rejected},
		{"sendmail user unknown", StageRcpt, "550 5.1.1 <x@y.example>... User unknown", Rejected},
		{"invalid address", StageRcpt, "553 5.1.3 Invalid address", Rejected},
		{"551 not local", StageRcpt, "551 5.1.6 User has moved; please try <z@y.example>", Rejected},
		{"icloud", StageRcpt, "550 5.1.1 <x@icloud.com>: user does not exist", Rejected},
		{"no enhanced mailbox not found", StageRcpt, "550 Mailbox not found", Rejected},

		// Full.
		{"552 5.2.2", StageRcpt, "552 5.2.2 mailbox full", Full},
		{"452 4.2.2", StageRcpt, "452 4.2.2 Mailbox full", Full},
		{"gmail over quota", StageRcpt, "452-4.2.2 The email account that you tried to reach is over quota. Please direct\n452 4.2.2 the recipient to https://support.google.com/mail/?p=OverQuotaTemp - gsmtp", Full},
		{"552 no enhanced", StageRcpt, "552 Requested mail action aborted: exceeded storage allocation", Full},
		{"550 over quota text", StageRcpt, "550 Mailbox quota exceeded", Full},

		// Greylisted and other temporary failures.
		{"postgrey", StageRcpt, "450 4.2.0 <x@y.example>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/y.example.html", Greylisted},
		{"try later", StageRcpt, "451 4.7.1 Please try again later", Greylisted},
		{"421 closing", StageRcpt, "421 4.7.0 Try again later, closing connection.", Greylisted},
		{"local error", StageRcpt, "451 4.3.0 Local error in processing", Greylisted},
		{"insufficient system storage", StageRcpt, "452 4.3.1 Insufficient system storage", Greylisted},
		{"temp user unknown", StageRcpt, "450 4.1.1 <x@y.example>: Recipient address rejected: unverified address", Greylisted},
		{"4xx blocklist is not permanent", StageRcpt, "450 4.7.1 Client host rejected: cannot find your hostname", Greylisted},

		// Blocked: about us.
		{"spamhaus", StageRcpt, "554 5.7.1 Service unavailable; Client host [1.2.3.4] blocked using zen.spamhaus.org; https://www.spamhaus.org/query/ip/1.2.3.4", Blocked},
		{"no reverse dns", StageRcpt, "550 5.7.1 Client host rejected: cannot find your reverse hostname, [1.2.3.4]", Blocked},
		{"helo rejected", StageRcpt, "504 5.5.2 <localhost>: Helo command rejected: need fully-qualified hostname", Blocked},
		{"outlook block list", StageRcpt, "550 5.7.1 Unfortunately, messages from [1.2.3.4] weren't sent. Please contact your Internet service provider since part of their network is on our block list (S3150).", Blocked},
		{"relay denied", StageRcpt, "554 5.7.1 <x@y.example>: Relay access denied", Blocked},
		{"sender domain", StageRcpt, "550 5.1.8 <verify@probe.test>: Sender address rejected: Domain not found", Blocked},
		{"barracuda no enhanced", StageRcpt, "554 Service unavailable; Client host [1.2.3.4] blocked using Barracuda Reputation", Blocked},
		{"spamcop", StageRcpt, "550 Rejected: 1.2.3.4 listed at bl.spamcop.net", Blocked},
		{"access denied ip", StageRcpt, "550 5.7.606 Access denied, banned sending IP [1.2.3.4]", Blocked},
		{"blocked beats unknown user", StageRcpt, "550 User unknown or your IP is blacklisted", Blocked},

		// Full under a 4xx: the words say so, whatever the code.
		{"4xx mailbox exceeds quota", StageRcpt, "452 Mailbox exceeds quota", Full},
		{"4xx over its storage limit", StageRcpt, "452 The recipient's mailbox is over its storage limit", Full},
		{"4xx reached its maximum size", StageRcpt, "452 User's mailbox has reached its maximum size", Full},
		{"4xx storage is full", StageRcpt, "451 Recipient's storage is full", Full},

		// Blocked by a filter that names itself, not a word like
		// "blocked"; the filter's name beside an explicit word about the
		// mailbox leaves the mailbox's answer standing.
		{"proofpoint ipcheck link", StageRcpt, "550 Blocked - see https://ipcheck.proofpoint.com/?ip=203.0.113.5", Blocked},
		{"ironport", StageRcpt, "554 Rejected by IronPort", Blocked},
		{"senderbase", StageRcpt, "554 Rejected by SenderBase", Blocked},
		{"sophos", StageRcpt, "550 Your email was rejected by Sophos", Blocked},
		{"fortiguard antispam", StageRcpt, "554 Rejected by FortiGuard AntiSpam", Blocked},
		{"mimecast unknown user under 5.7.1", StageRcpt, "550 5.7.1 Invalid recipient - https://community.mimecast.com/docs/DOC-1369#550", Rejected},
		{"proofpoint footer on user unknown", StageRcpt, "550 5.1.1 User unknown. Protected by Proofpoint", Rejected},
		{"junk mail rejected", StageRcpt, "550 5.7.1 Junk mail rejected", Blocked},
		{"unauthenticated senders", StageRcpt, "550 Unauthenticated senders are not accepted", Blocked},
		// An allowance of ours that is spent: blocked, never a full mailbox.
		{"daily relay quota", StageRcpt, "550 5.4.6 Daily relay quota exceeded", Blocked},
		{"relay quota", StageRcpt, "550 Relay quota exceeded", Blocked},
		{"hourly sending limit", StageRcpt, "554 Hourly sending limit reached", Blocked},
		{"4xx relay quota is our rate", StageRcpt, "451 4.7.0 Relay quota exceeded, try later", RateLimited},

		// Rate limited: never against the mailbox.
		{"too many recipients", StageRcpt, "452 4.5.3 Too many recipients", RateLimited},
		{"5.5.3 too many", StageRcpt, "550 5.5.3 Too many recipients", RateLimited},
		{"5.7.1 rate", StageRcpt, "550 5.7.1 Recipient address rejected: rate limit exceeded", RateLimited},
		{"421 too many connections", StageRcpt, "421 4.7.0 [1.2.3.4] Too many connections, slow down", RateLimited},
		{"4.7.0 rate", StageRcpt, "451 4.7.0 Temporary rate limit, try again later", RateLimited},
		{"gmail receiving rate", StageRcpt, "450-4.2.1 The user you are trying to contact is receiving mail at a rate that\n450 4.2.1 prevents additional messages from being delivered.", RateLimited},

		// Unknown: no clue, or parts that disagree.
		{"rfc 5321 mailbox unavailable is ambiguous", StageRcpt, "550 5.5.0 Requested action not taken: mailbox unavailable", Unknown},
		{"bare 550", StageRcpt, "550 Requested action not taken", Unknown},
		{"bare 554", StageRcpt, "554 Transaction failed", Unknown},
		{"552 message size", StageRcpt, "552 Message size exceeds fixed maximum message size", Unknown},
		{"mixed-up enhanced class", StageRcpt, "550 4.1.1 hmm", Unknown},
		{"garbled is not rbl", StageRcpt, "550 garbled command", Unknown},

		// Other stages: a 5xx is about us, a 4xx temporary.
		{"banner 554", StageBanner, "554 5.7.1 mx.example ESMTP not accepting messages", Blocked},
		{"banner 554 bare", StageBanner, "554 No SMTP service here", Blocked},
		{"banner 421", StageBanner, "421 4.3.2 Service shutting down", Greylisted},
		{"banner too many connections", StageBanner, "421 4.7.0 Too many concurrent SMTP connections from this IP", RateLimited},
		{"banner ok", StageBanner, "220 mx.example ESMTP Postfix", Accepted},
		{"ehlo rejected", StageEHLO, "550 5.7.1 <bad>: Helo command rejected: Host not found", Blocked},
		{"mail user unknown is about our sender", StageMail, "550 5.1.1 <verify@probe.test>: Sender address rejected: User unknown", Blocked},
		{"mail greylist", StageMail, "451 4.7.1 Greylisting in action, please come back later", Greylisted},
	}
	if len(tests) < 30 {
		t.Fatalf("only %d rows", len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := parse(t, tc.wire)
			if got := Classify(tc.stage, r); got != tc.want {
				t.Errorf("Classify(%s, %+v) = %s, want %s", tc.stage, r, got, tc.want)
			}
		})
	}
}

// TestReadEvidence holds the decision table of REPLIES.md row by row:
// each reply is read with the provider of the host that sent it, and the
// rule that decided is part of the answer.
func TestReadEvidence(t *testing.T) {
	const rcpt = "<jane.doe@example.com>: Recipient address rejected: "
	tests := []struct {
		name     string
		provider Provider
		wire     string
		want     Class
		rule     string
	}{
		// Explicit mailbox state with an explicit mailbox code is never
		// unknown, whatever generic words stand beside it.
		{"disabled, not accepting messages", "", "550 5.2.1 Mailbox disabled, not accepting messages", Rejected, "mailbox"},
		{"system not accepting network messages", "", "550 5.3.2 " + rcpt + "System not accepting network messages", Unknown, "system"},
		{"insufficient disk space is the server", "", "452 4.4.5 Insufficient disk space; try again later", Greylisted, "system"},
		{"internal system error from a policy service", "", "451 4.3.0 " + rcpt + "Internal system error", Greylisted, "system"},
		{"5xx internal error", "", "550 5.3.0 " + rcpt + "internal error", Unknown, "system"},
		// Postfix's wrapper is not evidence; its default X.7.1 is not
		// either.
		{"postfix access map REJECT", "", "554 5.7.1 " + rcpt + "Access denied", Blocked, "refusal"},
		{"postfix access map, mailbox text, default dsn", "", "550 5.7.1 " + rcpt + "Sorry, no mailbox here by that name", Rejected, "mailbox"},
		{"postfix access map, explicit dsn", "", "550 5.1.1 " + rcpt + "Mailbox does not exist", Rejected, "mailbox"},
		{"postfix virtual table", "", "550 5.1.1 " + rcpt + "User unknown in virtual mailbox table", Rejected, "mailbox"},
		{"postfix relay in recipient class", "", "554 5.7.1 " + rcpt + "Relay access denied", Blocked, "about_us"},
		{"postfix relay", "", "554 5.7.1 <jane.doe@example.com>: Relay access denied", Blocked, "about_us"},
		{"postfix policy spf", "", "550 5.7.1 " + rcpt + "Message rejected due to: SPF fail - not authorized", Blocked, "about_us"},
		{"postfix sender wrapper", "", "550 5.1.1 <verify@probe.test>: Sender address rejected: User unknown in local recipient table", Blocked, "wrapper_about_us"},
		{"postfix client wrapper", "", "554 5.7.1 <unknown[192.0.2.1]>: Client host rejected: Access denied", Blocked, "wrapper_about_us"},
		{"postgrey", "", "450 4.2.0 " + rcpt + "Greylisted, see http://postgrey.schweikert.ch/help/example.com.html", Greylisted, "temporary"},
		{"postfix verify front, store says unknown", "", "550 5.1.1 " + rcpt + "undeliverable address: host mail.example.com[192.0.2.1] said: 550 5.1.1 <jane.doe@example.com>... User unknown (in reply to RCPT TO command)", Rejected, "mailbox"},
		{"postfix verify front, store blocks us", "", "550 5.7.1 " + rcpt + "undeliverable address: host mail.example.com[192.0.2.1] said: 554 5.7.1 Service unavailable; client host blocked using zen.spamhaus.org (in reply to RCPT TO command)", Blocked, "about_us"},
		{"postfix verify front, deferred", "", "450 4.1.1 " + rcpt + "unverified address: host mail.example.com[192.0.2.1] said: 550 5.1.1 User unknown (in reply to RCPT TO command)", Greylisted, "temporary"},
		{"postfix verify front, local agent", "", "550 5.1.1 " + rcpt + "undeliverable address: unknown user: \"jane.doe\"", Rejected, "mailbox"},
		// Explicit mailbox words outrank a system or policy code that
		// many servers put on every refusal, when nothing else in the
		// text speaks of us or the system.
		{"5.7.1 no such user from a stranger", "", "550 5.7.1 No such user!", Rejected, "mailbox"},
		{"5.3.0 user unknown", "", "550 5.3.0 <jane.doe@example.com>... User unknown", Rejected, "mailbox"},
		{"5.7.1 disabled recipient", "", "550 5.7.1 Disabled recipient", Rejected, "mailbox"},
		{"not our user, no code", "", "550 not our user", Rejected, "mailbox"},
		{"exim callout relays the store's unknown user", "", "550 Callout verification failed: 550 5.1.1 <jane.doe@example.com>: Recipient address rejected: User unknown in local recipient table", Rejected, "mailbox"},
		{"exim callout relays the store's block", "", "550 Callout verification failed: 554 5.7.1 Service unavailable; Client host [192.0.2.1] blocked using zen.spamhaus.org", Blocked, "about_us"},
		// Parts that disagree with no rule to settle them: unknown.
		{"5.7.1 mailbox blocked may be a block of us", "", "550 5.7.1 Recipient address blocked", Unknown, "conflict"},
		{"5.7.1 mailbox words beside refusal words", "", "550 5.7.1 Unknown user; access denied by policy", Unknown, "conflict"},
		{"sender code beside mailbox words", "", "550 5.1.8 User unknown", Unknown, "conflict"},
		{"routing code beside unrouteable", "", "550 5.4.4 Unrouteable address", Unknown, "conflict"},
		{"mailbox code, refusal words", "", "550 5.1.1 Access denied", Unknown, "conflict"},
		{"weak words alone", "", "550 Address rejected", Unknown, "no_evidence"},
		{"weak words and a mailbox code", "", "550 5.1.1 Requested action not taken: mailbox unavailable", Rejected, "mailbox_code"},
		// Codes written where servers write them.
		{"qmail validrcptto", "", "553 sorry, this recipient is not in my validrcptto list (#5.7.1)", Rejected, "mailbox"},
		{"qmail rcpthosts", "", "553 sorry, that domain isn't in my list of allowed rcpthosts (#5.7.1)", Blocked, "about_us"},
		{"qmail chkuser", "", "550 sorry, no mailbox here by that name. (#5.1.1)", Rejected, "mailbox"},
		{"exchange 2003 hash code", "", "550 #5.7.1 Your access to submit messages to this e-mail system has been rejected.", Blocked, "about_us_code"},
		// MTA rules apply to the MTA's own fingerprint only.
		{"opensmtpd unknown virtual user", "", "524 5.2.4 Mailing list expansion problem: <nobody@virt.example>", Rejected, "opensmtpd_expansion"},
		{"5.2.4 from anyone else", "", "550 5.2.4 Mailing list expansion problem", Unknown, "no_evidence"},
		// Provider rules apply only where the provider answers.
		{"yandex no such user", ProviderYandex, "550 5.7.1 No such user!", Rejected, "yandex_no_such_user"},
		{"dbeb by fingerprint", "", "550 5.4.1 Recipient address rejected: Access denied. AS(201806281) [DB5EUR03FT012.eop-EUR03.prod.protection.outlook.com]", Rejected, "microsoft365_dbeb"},
		{"dbeb by mx", ProviderMicrosoft365, "550 5.4.1 Recipient address rejected: Access denied", Rejected, "microsoft365_dbeb"},
		{"5.4.1 access denied elsewhere", ProviderOther, "550 5.4.1 Recipient address rejected: Access denied", Blocked, "refusal"},
		{"5.4.1 relay from microsoft", ProviderMicrosoft365, "550 5.4.1 Relay Access Denied", Blocked, "about_us"},
		{"outlook.com by fingerprint", "", "550 5.5.0 Requested action not taken: mailbox unavailable (S2017062302).", Rejected, "outlook_mailbox_unavailable"},
		{"qq frequency", ProviderQQ, "550 Mailbox unavailable or access denied [MJWn5tMNF8Kf5ytZAA==.16384S2]", RateLimited, "qq_frequency_limit"},
		{"qq words elsewhere", ProviderOther, "550 Mailbox unavailable or access denied", Blocked, "refusal"},
		{"cisco ldap accept", ProviderCisco, "550 #5.1.0 Address rejected jane.doe@example.com", Rejected, "cisco_ldap_accept"},
		{"cisco words from another provider", ProviderGoogle, "550 #5.1.0 Address rejected jane.doe@example.com", Unknown, "no_evidence"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := parse(t, tc.wire)
			got := ReadFrom(StageRcpt, tc.provider, r)
			if got.Class != tc.want || got.Rule != tc.rule {
				t.Errorf("ReadFrom(%q, %+v) = %s by %s (family %q, wrapper %q), want %s by %s", tc.provider, r, got.Class, got.Rule, got.Family, got.Wrapper, tc.want, tc.rule)
			}
		})
	}
}

func TestProviderOf(t *testing.T) {
	tests := []struct {
		host string
		want Provider
	}{
		{"aspmx.l.google.com.", ProviderGoogle},
		{"ALT1.ASPMX.L.GOOGLE.COM", ProviderGoogle},
		{"smtp.google.com", ProviderGoogle},
		{"contoso-com.mail.protection.outlook.com", ProviderMicrosoft365},
		{"contoso-com.o-v1.mx.microsoft", ProviderMicrosoft365},
		{"hotmail-com.olc.protection.outlook.com", ProviderOutlook},
		{"mta5.am0.yahoodns.net", ProviderYahoo},
		{"mx01.mail.icloud.com", ProviderICloud},
		{"mx.zoho.eu", ProviderZoho},
		{"mx.yandex.net", ProviderYandex},
		{"emx.mail.ru", ProviderMailRu},
		{"mx00.gmx.net", ProviderGMX},
		{"mx-ha02.web.de", ProviderGMX},
		{"mail.protonmail.ch", ProviderProton},
		{"in1-smtp.messagingengine.com", ProviderFastmail},
		{"mx0a-00123401.pphosted.com", ProviderProofpoint},
		{"eu-smtp-inbound-1.mimecast.com", ProviderMimecast},
		{"d123456a.ess.barracudanetworks.com", ProviderBarracuda},
		{"mx1.hc1234-56.iphmx.com", ProviderCisco},
		{"example-com.in.tmes.trendmicro.com", ProviderTrendMicro},
		{"inbound-smtp.eu-west-1.amazonaws.com", ProviderAmazonSES},
		{"ec2-192-0-2-1.compute-1.amazonaws.com", ProviderOther},
		{"mx1.qq.com", ProviderQQ},
		{"notgoogle.com", ProviderOther},
		{"google.com.evil.example", ProviderOther},
		{"mx.example.com", ProviderOther},
	}
	for _, tc := range tests {
		if got := ProviderOf(tc.host); got != tc.want {
			t.Errorf("ProviderOf(%q) = %q, want %q", tc.host, got, tc.want)
		}
	}
	// A reply's fingerprint names its author when the host does not.
	gm := Reply{Code: 550, Enhanced: "5.1.1", Text: "The email account that you tried to reach does not exist. - gsmtp"}
	if got := ProviderOfReply("mx.front.example", gm); got != ProviderGoogle {
		t.Errorf("ProviderOfReply(gsmtp) = %q, want google", got)
	}
	if got := ProviderOfReply("mx01.mail.icloud.com", gm); got != ProviderICloud {
		t.Errorf("the MX host's provider comes first, got %q", got)
	}
}

func TestReplyParsing(t *testing.T) {
	tests := []struct {
		wire string
		want Reply
	}{
		{"250 2.1.5 Ok", Reply{250, "2.1.5", "Ok"}},
		{"550-5.1.1 The account\n550 5.1.1 does not exist", Reply{550, "5.1.1", "The account does not exist"}},
		{"550 Unrouteable address", Reply{550, "", "Unrouteable address"}},
		{"250", Reply{250, "", ""}},
		{"550 5.1.10 RESOLVER", Reply{550, "5.1.10", "RESOLVER"}},
		{"550 5.1.1", Reply{550, "5.1.1", ""}},
		{"550 5.1.1x no", Reply{550, "", "5.1.1x no"}},
		{"550 1.2.3 not a class", Reply{550, "", "1.2.3 not a class"}},
		{"250-mx\n250-PIPELINING\n250 SIZE", Reply{250, "", "mx PIPELINING SIZE"}},
		{"550 bad\x01control\x7f", Reply{550, "", "bad control"}},
		{"550 " + strings.Repeat("é", 300), Reply{550, "", strings.Repeat("é", maxText)}},
		{"550 \xff\xfe", Reply{550, "", "??"}},
		// A greeting that turns into a refusal: the refusal is the reply.
		{"220-mx.example ESMTP\n220-welcome\n554 5.7.1 Client host blocked", Reply{554, "5.7.1", "Client host blocked"}},
	}
	for _, tc := range tests {
		if got := parse(t, tc.wire); got != tc.want {
			t.Errorf("parse(%q) = %+v, want %+v", tc.wire, got, tc.want)
		}
	}
}

func TestReplyMalformed(t *testing.T) {
	for _, wire := range []string{
		"hello\r\n",
		"55\r\n",
		"550x\r\n",
		"999 no\r\n",
		"099 no\r\n",
		"250-a\r\n550 b\r\n",
		"250-" + strings.Repeat("a", maxLineLen) + "\r\n",
		strings.Repeat("250-a\r\n", maxLines+1) + "250 b\r\n",
		"250-unterminated",
	} {
		if _, err := readReply(bufio.NewReaderSize(strings.NewReader(wire), maxLineLen)); err == nil {
			t.Errorf("readReply(%.30q) = nil error, want one", wire)
		}
	}
}
