package smtpprobe

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
)

// Provider names the mail service behind an MX host (contract section 2,
// checks.smtp.provider). Rules that hold for one provider only apply when
// that provider is the one answering.
type Provider string

// The providers recognised. ProviderOther is any MX host we do not know;
// "" means no provider is known at all (no MX, or a reply read alone).
const (
	ProviderGoogle       Provider = "google"
	ProviderMicrosoft365 Provider = "microsoft365"
	ProviderOutlook      Provider = "outlook"
	ProviderYahoo        Provider = "yahoo"
	ProviderICloud       Provider = "icloud"
	ProviderZoho         Provider = "zoho"
	ProviderYandex       Provider = "yandex"
	ProviderMailRu       Provider = "mailru"
	ProviderGMX          Provider = "gmx"
	ProviderProton       Provider = "proton"
	ProviderFastmail     Provider = "fastmail"
	ProviderProofpoint   Provider = "proofpoint"
	ProviderMimecast     Provider = "mimecast"
	ProviderBarracuda    Provider = "barracuda"
	ProviderCisco        Provider = "cisco"
	ProviderTrendMicro   Provider = "trendmicro"
	ProviderAmazonSES    Provider = "amazonses"
	ProviderQQ           Provider = "qq"
	ProviderNetEase      Provider = "netease"
	ProviderOther        Provider = "other"
)

// ProviderInfo is what the service knows of one provider.
type ProviderInfo struct {
	// ID is the provider's name in verdicts.
	ID Provider
	// Name is the provider as people call it, for evidence.
	Name string
	// MX are MX host name suffixes, matched on a label boundary.
	MX []string
	// Fingerprints are RE2 patterns over a reply's lower-cased text that
	// only this provider's servers write (Gmail's "gsmtp", Microsoft's
	// "AS(201806281)"). They name the author of a reply that reaches us
	// through another host, or from an MX name we do not know.
	Fingerprints []string
	// Gateway marks security gateways in front of the real mail store:
	// with recipient verification off they take every RCPT and the store
	// bounces later, so a 250 is proof only when a random address on the
	// same domain was rejected.
	Gateway bool
	// AcceptThenBounce marks receivers whose 250 at RCPT is never proof:
	// they document bounces, after the message, for addresses they took.
	AcceptThenBounce bool
	// Source is where the MX names and the provider's rules come from.
	Source string

	fp *regexp.Regexp
}

// providers is the table. Order matters only for fingerprints: the first
// provider whose fingerprint matches names the reply's author.
var providers = []*ProviderInfo{
	{ID: ProviderGoogle, Name: "Google (Gmail, Workspace)",
		MX:           []string{"google.com", "googlemail.com"},
		Fingerprints: []string{`\bgsmtp\b`},
		Source:       "https://support.google.com/a/answer/174125 (MX values), https://support.google.com/a/answer/3726730 (replies end in gsmtp)"},
	{ID: ProviderOutlook, Name: "Outlook.com (Hotmail, Live, MSN)",
		MX:           []string{"olc.protection.outlook.com"},
		Fingerprints: []string{`\(s\d{10}\)`, `olc\.protection\.outlook\.com`},
		Source:       "https://sendersupport.olc.protection.outlook.com/pm/troubleshooting.aspx"},
	{ID: ProviderMicrosoft365, Name: "Microsoft 365 (Exchange Online)",
		MX:           []string{"mail.protection.outlook.com", "mx.microsoft"},
		Fingerprints: []string{`\bas\(\d{6,}\)`, `protection\.outlook\.com`, `\.prod\.outlook\.com`},
		Source:       "https://learn.microsoft.com/en-us/exchange/mail-flow-best-practices/use-directory-based-edge-blocking"},
	{ID: ProviderYahoo, Name: "Yahoo/AOL",
		MX:               []string{"yahoodns.net", "yahoo.com", "aol.com"},
		Fingerprints:     []string{`\.mail\.[a-z0-9]+\.yahoo\.com`, `yahoodns\.net`},
		AcceptThenBounce: true,
		Source:           "https://senders.yahooinc.com/smtp-error-codes/ (\"dd This user doesn't have a yahoo.com account\" arrives after the message)"},
	{ID: ProviderICloud, Name: "iCloud Mail",
		MX:     []string{"mail.icloud.com", "icloud.com", "me.com"},
		Source: "https://support.apple.com/en-us/102525 (custom domain MX mx01/mx02.mail.icloud.com)"},
	{ID: ProviderZoho, Name: "Zoho Mail",
		MX:     []string{"zoho.com", "zoho.eu", "zoho.in", "zoho.com.au", "zoho.jp", "zohomail.com"},
		Source: "https://www.zoho.com/mail/help/adminconsole/configure-email-delivery.html"},
	{ID: ProviderYandex, Name: "Yandex Mail",
		MX:           []string{"yandex.net", "yandex.ru", "yandex.com"},
		Fingerprints: []string{`mx\.yandex\.`},
		Source:       "https://yandex.com/support/mail/ (MX mx.yandex.net); \"550 5.7.1 No such user!\" is Yandex's unknown-user reply"},
	{ID: ProviderMailRu, Name: "Mail.ru",
		MX:     []string{"mail.ru"},
		Source: "https://help.mail.ru/biz/domain/ (MX emx.mail.ru)"},
	{ID: ProviderGMX, Name: "GMX / WEB.DE / mail.com",
		MX:     []string{"gmx.net", "gmx.com", "gmx.de", "web.de", "mail.com"},
		Source: "https://postmaster.gmx.net (MX mx00.gmx.net, mx00.web.de)"},
	{ID: ProviderProton, Name: "Proton Mail",
		MX:     []string{"protonmail.ch", "proton.ch"},
		Source: "https://proton.me/support/custom-domain (MX mail.protonmail.ch, mailsec.protonmail.ch)"},
	{ID: ProviderFastmail, Name: "Fastmail",
		MX:     []string{"messagingengine.com", "fastmail.com"},
		Source: "https://www.fastmail.help/hc/en-us/articles/360060591153 (MX in1-smtp.messagingengine.com)"},
	{ID: ProviderProofpoint, Name: "Proofpoint",
		MX:      []string{"pphosted.com", "ppe-hosted.com"},
		Gateway: true,
		Source:  "https://help.proofpoint.com (hosted MX *.pphosted.com; Essentials *.ppe-hosted.com)"},
	{ID: ProviderMimecast, Name: "Mimecast",
		MX:           []string{"mimecast.com", "mimecast.co.za", "mimecast-offshore.com"},
		Fingerprints: []string{`\bmimecast\b`},
		Gateway:      true,
		Source:       "https://community.mimecast.com/s/article/Mimecast-SMTP-Error-Codes-842605754 (MX *.mimecast.com; 451 for unknown internal users by default)"},
	{ID: ProviderBarracuda, Name: "Barracuda Email Security",
		MX:           []string{"barracudanetworks.com"},
		Fingerprints: []string{`\bcuda_\w+`},
		Gateway:      true,
		Source:       "https://campus.barracuda.com (MX dNNN.ess.barracudanetworks.com)"},
	{ID: ProviderCisco, Name: "Cisco Secure Email (IronPort)",
		MX:           []string{"iphmx.com"},
		Fingerprints: []string{`#5\.1\.0 address rejected`},
		Gateway:      true,
		Source:       "https://www.cisco.com/c/en/us/support/security/email-security-appliance (hosted MX *.iphmx.com)"},
	{ID: ProviderTrendMicro, Name: "Trend Micro Email Security",
		MX:      []string{"tmes.trendmicro.com", "tmes.trendmicro.eu", "tmes-anz.trendmicro.com", "tmems-jp.trendmicro.com"},
		Gateway: true,
		Source:  "https://docs.trendmicro.com/en-us/documentation/article/trend-micro-email-security-online-help-configuring-mx-records"},
	{ID: ProviderAmazonSES, Name: "Amazon SES inbound",
		// Only SES's receiving endpoints: any EC2 host is *.amazonaws.com.
		MX: []string{"inbound-smtp.us-east-1.amazonaws.com", "inbound-smtp.us-east-2.amazonaws.com",
			"inbound-smtp.us-west-2.amazonaws.com", "inbound-smtp.eu-west-1.amazonaws.com",
			"inbound-smtp.eu-central-1.amazonaws.com", "inbound-smtp.ap-southeast-2.amazonaws.com",
			"inbound-smtp.ap-northeast-1.amazonaws.com", "inbound-smtp.ca-central-1.amazonaws.com"},
		Source: "https://docs.aws.amazon.com/ses/latest/dg/receiving-email-mx-record.html (inbound-smtp.REGION.amazonaws.com)"},
	{ID: ProviderQQ, Name: "QQ Mail (Tencent)",
		MX:           []string{"qq.com"},
		Fingerprints: []string{`service\.mail\.qq\.com`},
		Source:       "https://service.mail.qq.com/detail/122/166 (\"mailbox unavailable or access denied\" is a frequency limit)"},
	{ID: ProviderNetEase, Name: "NetEase (163, 126, yeah.net)",
		MX:     []string{"163.com", "126.com", "yeah.net", "netease.com"},
		Source: "https://help.mail.163.com/faq.do?m=list&categoryID=90 (MX *.mxmail.netease.com)"},
}

func init() {
	for _, p := range providers {
		if len(p.Fingerprints) > 0 {
			p.fp = regexp.MustCompile(strings.Join(p.Fingerprints, "|"))
		}
	}
}

// ProviderOf names the provider of an MX host, or ProviderOther. The
// longest matching suffix wins, so that Outlook.com's
// *.olc.protection.outlook.com is not taken for Microsoft 365's
// *.mail.protection.outlook.com.
func ProviderOf(host string) Provider {
	if info := providerOf(host); info != nil {
		return info.ID
	}
	return ProviderOther
}

// Info returns what is known of p, or nil for ProviderOther and "".
func (p Provider) Info() *ProviderInfo {
	if i := slices.IndexFunc(providers, func(info *ProviderInfo) bool { return info.ID == p }); i >= 0 {
		return providers[i]
	}
	return nil
}

func providerOf(host string) *ProviderInfo {
	h := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(host)), ".")
	var best *ProviderInfo
	bestLen := 0
	for _, p := range providers {
		for _, s := range p.MX {
			if (h == s || strings.HasSuffix(h, "."+s)) && len(s) > bestLen {
				best, bestLen = p, len(s)
			}
		}
	}
	return best
}

// authorOf names the provider whose fingerprint a reply's normalized text
// carries, or "".
func authorOf(normalized string) Provider {
	for _, p := range providers {
		if p.fp != nil && p.fp.MatchString(normalized) {
			return p.ID
		}
	}
	return ""
}

// ProviderOfReply names the provider of a reply from the MX host that sent
// it and the reply's own text: the host's provider when it is known, else
// the provider whose fingerprint the text carries, else ProviderOther.
func ProviderOfReply(host string, r Reply) Provider {
	return Reading{Author: authorOf(normalize(r.Text))}.ProviderAt(host)
}

// ProviderAt names the provider of a reply read as rd from an MX host: the
// host's provider when it is known, else the author its fingerprint names,
// else ProviderOther. It spares reading the reply's text again.
func (rd Reading) ProviderAt(host string) Provider {
	if p := ProviderOf(host); p != ProviderOther {
		return p
	}
	return cmp.Or(rd.Author, ProviderOther)
}
