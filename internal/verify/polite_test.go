package verify_test

import (
	"testing"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

func TestProviderKey(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]string{
		"tenant1-com.mail.protection.outlook.com.": "microsoft365",
		"Contoso-COM.mail.protection.outlook.com":  "microsoft365",
		"alt2.aspmx.l.google.com":                  "google",
		"aspmx.l.google.com":                       "google",
		"mta7.am0.yahoodns.net":                    "yahoo",
		"mx1.example.co.uk":                        "example.co.uk",
		"mail.shop.example.com":                    "example.com",
		"localhost":                                "localhost",
	} {
		if got := verify.ProviderKey(host); got != want {
			t.Errorf("ProviderKey(%q) = %q, want %q", host, got, want)
		}
	}
	for p, want := range map[string]string{"google": verify.ClassLarge, "microsoft365": verify.ClassLarge,
		"proofpoint": verify.ClassGateway, "example.com": verify.ClassOther, "zoho": verify.ClassOther} {
		if got := verify.ProviderClass(p); got != want {
			t.Errorf("ProviderClass(%q) = %q, want %q", p, got, want)
		}
	}
}

func TestThrottled(t *testing.T) {
	t.Parallel()
	const openDetail = "the mail hosts asked us to try again later"
	for _, tc := range []struct {
		name              string
		c                 evs.SMTPCheck
		throttled, atOpen bool
	}{
		{"421 at the banner", evs.SMTPCheck{Code: 421, EnhancedCode: "4.7.0", Message: "Too many connections", Detail: openDetail}, true, true},
		{"421 at RCPT", evs.SMTPCheck{Code: 421, EnhancedCode: "4.7.0", Message: "Try again later, closing connection"}, true, false},
		{"rate at RCPT", evs.SMTPCheck{Code: 450, EnhancedCode: "4.7.1", Message: "Too many recipients, rate limit exceeded"}, true, false},
		{"greylisted", evs.SMTPCheck{Code: 450, EnhancedCode: "4.2.0", Message: "Greylisted, see http://postgrey.schweikert.ch/"}, false, false},
		{"rejected", evs.SMTPCheck{Code: 550, EnhancedCode: "5.1.1", Message: "no such user"}, false, false},
		{"accepted", evs.SMTPCheck{Code: 250, Message: "OK"}, false, false},
		{"no reply", evs.SMTPCheck{}, false, false},
	} {
		th, open := verify.Throttled(tc.c)
		if th != tc.throttled || (th && open != tc.atOpen) {
			t.Errorf("%s: Throttled = %v, %v; want %v, %v", tc.name, th, open, tc.throttled, tc.atOpen)
		}
	}
}
