package testkit_test

import (
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
)

// replies holds one SMTP conversation with addr (EHLO as helo) up to RCPT
// and returns each recipient's whole reply, multi-line replies joined as
// "CODE line1 / line2".
func replies(t *testing.T, addr, helo string, rcpts ...string) []string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	tp := textproto.NewConn(c)
	if _, _, err := tp.ReadResponse(220); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"EHLO " + helo, "MAIL FROM:<verify@probe.evs.test>"} {
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
		code, msg, err := tp.ReadResponse(0)
		if _, ok := err.(*textproto.Error); err != nil && !ok {
			t.Fatalf("RCPT %s: %v", r, err)
		}
		out = append(out, strconv.Itoa(code)+" "+strings.ReplaceAll(msg, "\n", " / "))
	}
	tp.PrintfLine("QUIT")
	return out
}

// TestEximHarness: a private Exim answers as Exim on both of its listeners,
// takes its mailboxes and catch-all domain, refuses unknown users and
// relaying in its own words, relays a callout's refusal from the backend,
// and an ACL statement applies on its listener only.
func TestEximHarness(t *testing.T) {
	backend := testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: func(addr string) string {
		if strings.HasPrefix(addr, "alice@") {
			return "250 2.1.5 Ok"
		}
		return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown"
	}})
	ex := testkit.StartExim(t, testkit.EximOptions{
		IP:             "127.0.0.66",
		Listeners:      []string{"127.0.0.67"},
		Mailboxes:      []string{"alice@corp.test"},
		CatchAll:       []string{"all.test"},
		CalloutDomains: []string{"gw.test"},
		CalloutBackend: backend.Addr,
		RcptACL: `  deny condition = ${if eq{$received_ip_address}{127.0.0.67}}
       message = $sender_host_address is listed at bl.test`,
	})
	t.Logf("exim started in %v: %s", ex.Startup, ex.Banner)
	if !strings.HasPrefix(ex.Banner, "220 mx.exim.test ESMTP Exim 4.") {
		t.Errorf("banner %q", ex.Banner)
	}
	got := replies(t, ex.Addr, "probe.evs.test", "alice@corp.test", "nobody@corp.test", "x@all.test", "x@elsewhere.test", "alice@gw.test", "bob@gw.test")
	want := []string{
		"250 Accepted",
		"550 Unrouteable address",
		"250 Accepted",
		"550 relay not permitted",
		"250 Accepted",
		"550 Callout verification failed: / 550 5.1.1 <bob@gw.test>: Recipient address rejected: User unknown",
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("reply %d: %q, want %q", i, got[i], want[i])
		}
	}
	if got := replies(t, "127.0.0.67:"+strconv.Itoa(ex.Port), "probe.evs.test", "alice@corp.test"); got[0] != "550 127.0.0.1 is listed at bl.test" {
		t.Errorf("second listener: %q", got[0])
	}
	if !strings.Contains(ex.Log(), "rejected RCPT <nobody@corp.test>: Unrouteable address") {
		t.Errorf("the mainlog does not show the refusal:\n%s", ex.Log())
	}
}
