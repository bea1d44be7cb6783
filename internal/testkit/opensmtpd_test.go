package testkit_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/testkit"
)

// TestOpenSMTPDHarness: a private OpenSMTPD answers as OpenSMTPD on both of
// its listeners, takes the users of its tables, refuses the others in its
// own words (which differ with the rule that refuses them), and a
// listener's filter applies on that listener only. Two instances at once
// do not meet: each has its own /var, control socket included.
func TestOpenSMTPDHarness(t *testing.T) {
	opts := testkit.OpenSMTPDOptions{
		IP:        "127.0.0.76",
		Listeners: []testkit.OpenSMTPDListener{{IP: "127.0.0.77", Filter: "listed"}},
		Tables: map[string][]string{
			"virtuals":   {"alice@virt.test mail"},
			"recipients": {"alice@rcpt.test"},
			"us":         {"127.0.0.1"},
		},
		Filters: []string{`filter "listed" phase rcpt-to match src <us> reject "550 5.7.1 listed at bl.test"`},
		Rules: []string{
			`action "deliver" maildir virtual <virtuals>`,
			`match from any for domain "virt.test" action "deliver"`,
			`action "mbox" mbox`,
			`match from any for domain "rcpt.test" rcpt-to <recipients> action "mbox"`,
		},
	}
	s := testkit.StartOpenSMTPD(t, opts)
	t.Logf("opensmtpd started in %v: %s", s.Startup, s.Banner)
	opts.IP, opts.Listeners = "127.0.0.78", nil
	other := testkit.StartOpenSMTPD(t, opts)

	got := replies(t, s.Addr, "probe.evs.test", "alice@virt.test", "nobody@virt.test", "nobody@rcpt.test", "x@elsewhere.test")
	want := []string{
		"250 2.1.5 Destination address valid: Recipient ok",
		"524 5.2.4 Mailing list expansion problem: <nobody@virt.test>",
		"550 Invalid recipient: <nobody@rcpt.test>",
		"550 Invalid recipient: <x@elsewhere.test>",
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("reply %d: %q, want %q", i, got[i], want[i])
		}
	}
	if got := replies(t, "127.0.0.77:"+strconv.Itoa(s.Port), "probe.evs.test", "alice@virt.test"); got[0] != "550 5.7.1 listed at bl.test" {
		t.Errorf("filtered listener: %q", got[0])
	}
	if got := replies(t, other.Addr, "probe.evs.test", "alice@virt.test"); got[0] != "250 2.1.5 Destination address valid: Recipient ok" {
		t.Errorf("second instance: %q", got[0])
	}
	if !strings.Contains(s.Log(), `result="550 Invalid recipient: <nobody@rcpt.test>"`) {
		t.Errorf("the log does not show the refusal:\n%s", s.Log())
	}
}
