package smtpprobe_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// postscreen's words to a client it has not seen before, recorded from
// Postfix 3.7.11 (testkit.TestPostscreenHarness).
const screenRefusal = "450 4.3.2 Service currently unavailable"

func TestFirstContactRefusal(t *testing.T) {
	for _, tc := range []struct {
		r    smtpprobe.Reply
		want bool
	}{
		{smtpprobe.Reply{Code: 450, Enhanced: "4.3.2", Text: "Service currently unavailable"}, true},
		{smtpprobe.Reply{Code: 421, Enhanced: "4.3.2", Text: "Service currently unavailable"}, true},
		{smtpprobe.Reply{Code: 450, Enhanced: "4.3.2", Text: "SERVICE CURRENTLY UNAVAILABLE"}, true},
		// Other 4.3.2 replies are a server going away or overloaded:
		// a reconnect a moment later would meet the same.
		{smtpprobe.Reply{Code: 421, Enhanced: "4.3.2", Text: "Service shutting down"}, false},
		{smtpprobe.Reply{Code: 421, Enhanced: "4.3.2", Text: "All server ports are busy"}, false},
		{smtpprobe.Reply{Code: 450, Enhanced: "4.2.0", Text: "Service currently unavailable"}, false},
		{smtpprobe.Reply{Code: 550, Enhanced: "5.3.2", Text: "Service currently unavailable"}, false},
		{smtpprobe.Reply{Code: 450, Enhanced: "4.7.1", Text: "<a@b.test>: Recipient address rejected: Service currently unavailable"}, false},
	} {
		if got := smtpprobe.FirstContactRefusal(tc.r); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.r, got, tc.want)
		}
	}
}

// screening starts a server that refuses every RCPT of its first
// connection as postscreen does (every connection when always is set),
// and accepts them afterwards.
func screening(t *testing.T, ip string, always bool) *testkit.SMTPServer {
	t.Helper()
	var srv *testkit.SMTPServer
	srv = testkit.StartSMTP(t, testkit.SMTPOptions{IP: ip, Rcpt: func(string) string {
		if always || srv.Connections() == 1 {
			return screenRefusal
		}
		return "250 2.1.5 Ok"
	}})
	return srv
}

func screenProber(t *testing.T, srv *testkit.SMTPServer) *smtpprobe.Prober {
	return newProber(t, srv.Port, func(c *smtpprobe.Config) {
		c.Resolver = hosts{"mx.screen.test": ip(srv.Host)}
		c.ScreenPause = 50 * time.Millisecond
	})
}

// TestScreenedAtRcpt: a first contact refused at RCPT by a screening front
// gets one reconnect, after a polite QUIT, and the answer of the second
// session; the session goes on over the new connection.
func TestScreenedAtRcpt(t *testing.T) {
	srv := screening(t, "127.0.4.1", false)
	p := screenProber(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.Open(ctx, "screen.test", []string{"mx.screen.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, class, err := s.Rcpt(ctx, "alice@screen.test")
	if err != nil || class != smtpprobe.Accepted || r.Code != 250 {
		t.Fatalf("after the reconnect: %d %s %v", r.Code, class, err)
	}
	if r, class, err := s.Rcpt(ctx, "bob@screen.test"); err != nil || class != smtpprobe.Accepted {
		t.Fatalf("second RCPT: %d %s %v", r.Code, class, err)
	}
	if n := srv.Connections(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
	s.Close()
	want := []string{
		"EHLO probe.evs.test", "MAIL FROM:<verify@probe.evs.test>", "RCPT TO:<alice@screen.test>", "QUIT",
		"EHLO probe.evs.test", "MAIL FROM:<verify@probe.evs.test>", "RCPT TO:<alice@screen.test>", "RCPT TO:<bob@screen.test>", "QUIT",
	}
	if got := srv.Commands(); !slices.Equal(got, want) {
		t.Fatalf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestScreenedTwice: a front that refuses the reconnect too gets no third
// session; its refusal stands as a temporary failure, never a verdict on
// the mailbox, and the session goes on.
func TestScreenedTwice(t *testing.T) {
	srv := screening(t, "127.0.4.2", true)
	p := screenProber(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.Open(ctx, "screen.test", []string{"mx.screen.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, a := range []string{"alice@screen.test", "bob@screen.test"} {
		r, class, err := s.Rcpt(ctx, a)
		if err != nil || class != smtpprobe.Greylisted || r.Code != 450 || r.Enhanced != "4.3.2" {
			t.Fatalf("%s: %d %s %s %v", a, r.Code, r.Enhanced, class, err)
		}
	}
	if n := srv.Connections(); n != 2 {
		t.Fatalf("%d connections, want 2: one reconnect, no more", n)
	}
}

// TestScreenedNoRoom: when the caller's deadline leaves no room for the
// pause and a second session, there is no reconnect: the refusal is the
// answer and the connection stays usable.
func TestScreenedNoRoom(t *testing.T) {
	srv := screening(t, "127.0.4.3", false)
	p := screenProber(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := p.Open(ctx, "screen.test", []string{"mx.screen.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, a := range []string{"alice@screen.test", "bob@screen.test"} {
		if r, class, err := s.Rcpt(ctx, a); err != nil || class != smtpprobe.Greylisted {
			t.Fatalf("%s: %d %s %v", a, r.Code, class, err)
		}
	}
	if n := srv.Connections(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// TestScreenedBeforeRcpt: a screening refusal before RCPT (here at the
// banner, with the 421 that hangs up) gets one reconnect per Open, not one
// per host: the second host is tried once, and the refusal is temporary.
func TestScreenedBeforeRcpt(t *testing.T) {
	srvs, port := farm(t,
		testkit.SMTPOptions{IP: "127.0.4.4", Banner: "421 4.3.2 Service currently unavailable"},
		testkit.SMTPOptions{IP: "127.0.4.5", MailReply: screenRefusal},
	)
	p := newProber(t, port, func(c *smtpprobe.Config) {
		c.Resolver = hosts{"mx1.screen.test": ip(srvs[0].Host), "mx2.screen.test": ip(srvs[1].Host)}
		c.ScreenPause = 50 * time.Millisecond
	})
	_, err := p.Open(context.Background(), "screen.test", []string{"mx1.screen.test", "mx2.screen.test"})
	var pe *smtpprobe.ProbeError
	if !errors.As(err, &pe) || pe.Class != smtpprobe.Greylisted || pe.Reply.Enhanced != "4.3.2" {
		t.Fatalf("Open: %v", err)
	}
	if a, b := srvs[0].Connections(), srvs[1].Connections(); a != 2 || b != 1 {
		t.Fatalf("connections %d and %d, want 2 and 1", a, b)
	}
	if got := srvs[0].Commands(); len(got) != 0 {
		t.Fatalf("commands after a 421 greeting: %q (it hung up: not even QUIT)", got)
	}
}
