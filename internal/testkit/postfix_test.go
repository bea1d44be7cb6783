package testkit_test

import (
	"fmt"
	"net"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
)

// session holds one SMTP conversation with addr up to RCPT and returns the
// reply line to each recipient.
func session(t *testing.T, addr string, rcpts ...string) []string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tp := textproto.NewConn(c)
	if _, _, err := tp.ReadResponse(220); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"EHLO probe.evs.test", "MAIL FROM:<verify@probe.evs.test>"} {
		if err := tp.PrintfLine("%s", cmd); err != nil {
			t.Fatal(err)
		}
		if _, _, err := tp.ReadResponse(250); err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
	}
	var out []string
	for _, r := range rcpts {
		if err := tp.PrintfLine("RCPT TO:<%s>", r); err != nil {
			t.Fatal(err)
		}
		line, err := tp.ReadLine()
		if err != nil {
			t.Fatalf("RCPT %s: %v", r, err)
		}
		out = append(out, line)
	}
	tp.PrintfLine("QUIT")
	return out
}

// TestPostfixHarness: a private Postfix answers as Postfix on both of its
// listeners, takes its mailboxes, refuses unknown users, relaying, access
// map and policy refusals in its own words, and a listener's overrides
// apply on that listener only.
func TestPostfixHarness(t *testing.T) {
	policy := testkit.StartPolicy(t, func(req map[string]string) string {
		if req["recipient"] == "policy@corp.test" {
			return "550 5.7.1 refused by policy"
		}
		return ""
	})
	pf := testkit.StartPostfix(t, testkit.PostfixOptions{
		IP:              "127.0.0.31",
		Domains:         []string{"corp.test"},
		Mailboxes:       []string{"alice@corp.test"},
		RecipientAccess: map[string]string{"plain@corp.test": "REJECT", "full@corp.test": "452 4.2.2 Mailbox full"},
		Policy:          policy.Addr,
		Listeners: []testkit.PostfixListener{{
			IP:           "127.0.0.32",
			ClientAccess: map[string]string{"127": "REJECT"},
		}},
	})
	t.Logf("postfix started in %v: %s", pf.Startup, pf.Banner)
	if pf.Banner != "220 mx.postfix.test ESMTP Postfix" {
		t.Fatalf("banner %q", pf.Banner)
	}
	got := session(t, pf.Addr, "alice@corp.test", "bob@corp.test", "plain@corp.test", "full@corp.test", "policy@corp.test", "x@elsewhere.test")
	want := []string{
		"250 2.1.5 Ok",
		"550 5.1.1 <bob@corp.test>: Recipient address rejected: User unknown in virtual mailbox table",
		"554 5.7.1 <plain@corp.test>: Recipient address rejected: Access denied",
		"452 4.2.2 <full@corp.test>: Recipient address rejected: Mailbox full",
		"550 5.7.1 <policy@corp.test>: Recipient address rejected: refused by policy",
		"554 5.7.1 <x@elsewhere.test>: Relay access denied",
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("reply %d: %q, want %q", i, got[i], want[i])
		}
	}
	second := net.JoinHostPort("127.0.0.32", strings.Split(pf.Addr, ":")[1])
	if got := session(t, second, "alice@corp.test"); got[0] != "554 5.7.1 <unknown[127.0.0.1]>: Client host rejected: Access denied" {
		t.Errorf("second listener: %q", got[0])
	}
}

// TestPostgreyHarness: a real postgrey behind Postfix greylists the first
// attempt of a triplet, and lets it through once the delay has passed.
func TestPostgreyHarness(t *testing.T) {
	g := testkit.StartPostgrey(t, testkit.PostgreyOptions{Delay: time.Second})
	pf := testkit.StartPostfix(t, testkit.PostfixOptions{
		IP:        "127.0.0.33",
		Domains:   []string{"grey.test"},
		Mailboxes: []string{"alice@grey.test"},
		Policy:    g.Addr,
	})
	t.Logf("postgrey started in %v, postfix in %v", g.Startup, pf.Startup)
	got := session(t, pf.Addr, "alice@grey.test")[0]
	if !strings.HasPrefix(got, "450 4.2.0 <alice@grey.test>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/grey.test.html") {
		t.Fatalf("first attempt: %q", got)
	}
	// Tried again as a sender would until postgrey's delay (its clock, in
	// whole seconds) has passed: then it lets the triplet through.
	testkit.EventuallyEvery(t, 10*time.Second, 250*time.Millisecond, func() error {
		if got := session(t, pf.Addr, "alice@grey.test")[0]; got != "250 2.1.5 Ok" {
			return fmt.Errorf("after the delay: %q", got)
		}
		return nil
	})
}

// TestPostscreenHarness: postscreen in front of the Postfix answers a
// client's first session, tests passed or not, with 450 4.3.2 at RCPT, and
// lets the same client through to smtpd when it reconnects.
func TestPostscreenHarness(t *testing.T) {
	pf := testkit.StartPostfix(t, testkit.PostfixOptions{
		IP:         "127.0.0.34",
		Domains:    []string{"screen.test"},
		Mailboxes:  []string{"alice@screen.test"},
		Postscreen: true,
	})
	t.Logf("postfix with postscreen started in %v: %s", pf.Startup, pf.Banner)
	if got := session(t, pf.Addr, "alice@screen.test", "bob@screen.test"); got[0] != "450 4.3.2 Service currently unavailable" || got[1] != got[0] {
		t.Fatalf("first contact: %q", got)
	}
	got := session(t, pf.Addr, "alice@screen.test", "bob@screen.test")
	want := []string{"250 2.1.5 Ok", "550 5.1.1 <bob@screen.test>: Recipient address rejected: User unknown in virtual mailbox table"}
	if !slices.Equal(got, want) {
		t.Fatalf("after reconnecting: %q, want %q", got, want)
	}
}
