package smtpprobe_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// farm starts servers on distinct loopback IPs sharing one port, as the
// prober dials one port on every host. Options with an empty IP get
// 127.0.2.<i+1>. It returns the servers and the shared port.
func farm(t *testing.T, opts ...testkit.SMTPOptions) ([]*testkit.SMTPServer, int) {
	t.Helper()
	var srvs []*testkit.SMTPServer
	port := 0
	for i, o := range opts {
		if o.IP == "" {
			o.IP = "127.0.2." + string(rune('1'+i))
		}
		o.Port = port
		s := testkit.StartSMTP(t, o)
		port = s.Port
		srvs = append(srvs, s)
	}
	return srvs, port
}

// deadIP has nothing listening: dialling it is refused at once.
const deadIP = "127.0.3.1"

func TestOpenFallsThrough(t *testing.T) {
	srvs, port := farm(t,
		testkit.SMTPOptions{Silent: true},
		testkit.SMTPOptions{Banner: "421 4.3.2 Service shutting down"},
		testkit.SMTPOptions{Banner: "HTTP/1.1 400 Bad Request"},
		testkit.SMTPOptions{},
	)
	res := hosts{
		"dead.test":    ip(deadIP),
		"silent.test":  ip(srvs[0].Host),
		"busy.test":    ip(srvs[1].Host),
		"notsmtp.test": ip(srvs[2].Host),
		"good.test":    ip(srvs[3].Host),
	}
	p := newProber(t, port, func(c *smtpprobe.Config) {
		c.Resolver = res
		c.ReplyTimeout = 200 * time.Millisecond
	})
	tests := []struct {
		name  string
		hosts []string
	}{
		{"refused then good", []string{"dead.test", "good.test"}},
		{"silent then good", []string{"silent.test", "good.test"}},
		{"421 banner then good", []string{"busy.test", "good.test"}},
		{"not smtp then good", []string{"notsmtp.test", "good.test"}},
		{"unresolvable then good", []string{"nxdomain.test", "good.test"}},
		{"all bad then good", []string{"dead.test", "nxdomain.test", "silent.test", "busy.test", "good.test"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := p.Open(context.Background(), "d.test", tc.hosts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Host() != "good.test" {
				t.Errorf("Host() = %q, want good.test", s.Host())
			}
			if _, class, err := s.Rcpt(context.Background(), "a@d.test"); err != nil || class != smtpprobe.Accepted {
				t.Errorf("Rcpt = %s, %v", class, err)
			}
		})
	}
}

func TestOpenFailures(t *testing.T) {
	srvs, port := farm(t,
		testkit.SMTPOptions{Silent: true},
		testkit.SMTPOptions{Banner: "554 5.7.1 mx.test ESMTP not accepting messages from you"},
		testkit.SMTPOptions{Banner: "421 4.7.0 Too many concurrent connections from your IP"},
		testkit.SMTPOptions{MailReply: "550 5.7.1 <verify@probe.evs.test>: Sender address rejected: Access denied"},
		testkit.SMTPOptions{EHLOReply: "421 4.3.2 Shutting down"},
		testkit.SMTPOptions{},
	)
	silent, blocked, busy, mailRefused, ehloTemp, good := srvs[0], srvs[1], srvs[2], srvs[3], srvs[4], srvs[5]
	res := hosts{
		"dead.test":    ip(deadIP),
		"dead2.test":   ip("127.0.3.2"),
		"silent.test":  ip(silent.Host),
		"blocked.test": ip(blocked.Host),
		"busy.test":    ip(busy.Host),
		"mail.test":    ip(mailRefused.Host),
		"ehlo.test":    ip(ehloTemp.Host),
		"good.test":    ip(good.Host),
	}
	p := newProber(t, port, func(c *smtpprobe.Config) {
		c.Resolver = res
		c.ReplyTimeout = 200 * time.Millisecond
	})
	tests := []struct {
		name    string
		hosts   []string
		host    string // ProbeError.Host
		stage   string
		code    int
		class   smtpprobe.Class
		timeout bool
	}{
		{"all refused", []string{"dead.test", "dead2.test"}, "dead2.test", "", 0, smtpprobe.Unknown, false},
		{"all silent", []string{"silent.test"}, "silent.test", "banner", 0, smtpprobe.Unknown, true},
		{"refused beats silence", []string{"silent.test", "dead.test"}, "dead.test", "", 0, smtpprobe.Unknown, false},
		{"unresolvable", []string{"nxdomain.test"}, "nxdomain.test", "", 0, smtpprobe.Unknown, false},
		{"banner 554 is blocked and ends the search", []string{"blocked.test", "good.test"}, "blocked.test", "banner", 554, smtpprobe.Blocked, false},
		{"reply beats silence", []string{"silent.test", "busy.test", "dead.test"}, "busy.test", "banner", 421, smtpprobe.RateLimited, false},
		{"mail from refused", []string{"mail.test"}, "mail.test", "mail", 550, smtpprobe.Blocked, false},
		{"ehlo 421", []string{"ehlo.test"}, "ehlo.test", "ehlo", 421, smtpprobe.Greylisted, false},
		{"no hosts", nil, "", "", 0, smtpprobe.Unknown, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := good.Connections()
			s, err := p.Open(context.Background(), "d.test", tc.hosts)
			if err == nil {
				s.Close()
				t.Fatalf("Open succeeded on %s", s.Host())
			}
			var pe *smtpprobe.ProbeError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v is not a *ProbeError", err, err)
			}
			if pe.Host != tc.host || pe.Stage != tc.stage || pe.Reply.Code != tc.code || pe.Class != tc.class || pe.Timeout != tc.timeout {
				t.Errorf("ProbeError = %+v (%v)\nwant host %s stage %q code %d class %s timeout %v", *pe, err, tc.host, tc.stage, tc.code, tc.class, tc.timeout)
			}
			if pe.Reply.Code != 0 && pe.Reply.Text == "" {
				t.Errorf("reply text lost: %+v", pe.Reply)
			}
			if good.Connections() != before {
				t.Errorf("the good host was tried after a blocking refusal")
			}
		})
	}
	if cmds := blocked.Commands(); !slices.Equal(cmds, []string{"QUIT"}) {
		t.Errorf("after a 554 banner the prober sent %q, want only QUIT", cmds)
	}
	if cmds := mailRefused.Commands(); slices.ContainsFunc(cmds, func(c string) bool { return strings.HasPrefix(c, "RCPT") }) {
		t.Errorf("RCPT sent after MAIL FROM was refused: %q", cmds)
	}
}

func TestHELOFallback(t *testing.T) {
	srv := testkit.StartSMTP(t, testkit.SMTPOptions{EHLOReply: "502 5.5.1 Error: command not implemented"})
	p := newProber(t, srv.Port, nil)
	s, err := p.Open(context.Background(), "d.test", []string{"mx1.test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, class, err := s.Rcpt(context.Background(), "a@d.test"); err != nil || class != smtpprobe.Accepted {
		t.Fatalf("Rcpt = %s, %v", class, err)
	}
	s.Close()
	want := []string{"EHLO " + helo, "HELO " + helo, "MAIL FROM:<verify@" + helo + ">", "RCPT TO:<a@d.test>", "QUIT"}
	if got := srv.Commands(); !slices.Equal(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
}

// recordingDialer keeps every byte the client writes.
type recordingDialer struct {
	mu  sync.Mutex
	out bytes.Buffer
}

func (d *recordingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, d: d}, nil
}

func (d *recordingDialer) written() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

type recordingConn struct {
	net.Conn
	d *recordingDialer
}

func (c *recordingConn) Write(b []byte) (int, error) {
	c.d.mu.Lock()
	c.d.out.Write(b)
	c.d.mu.Unlock()
	return c.Conn.Write(b)
}

func TestSTARTTLS(t *testing.T) {
	srv := testkit.StartSMTP(t, testkit.SMTPOptions{StartTLS: true})
	rec := &recordingDialer{}
	p := newProber(t, srv.Port, func(c *smtpprobe.Config) { c.Dialer = rec })
	ctx := context.Background()
	s, err := p.Open(ctx, "d.test", []string{"mx1.test"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.TLS() {
		t.Error("TLS() = false after STARTTLS")
	}
	if _, class, err := s.Rcpt(ctx, "secret.person@d.test"); err != nil || class != smtpprobe.Accepted {
		t.Fatalf("Rcpt = %s, %v", class, err)
	}
	s.Close()

	wantTLS := []string{"EHLO " + helo, "MAIL FROM:<verify@" + helo + ">", "RCPT TO:<secret.person@d.test>", "QUIT"}
	if got := srv.TLSCommands(); !slices.Equal(got, wantTLS) {
		t.Errorf("commands over TLS %q, want %q", got, wantTLS)
	}
	if got := srv.Commands(); !slices.Equal(got[:2], []string{"EHLO " + helo, "STARTTLS"}) {
		t.Errorf("plain commands %q, want EHLO then STARTTLS", got)
	}
	wire := rec.written()
	if !strings.Contains(wire, "STARTTLS\r\n") {
		t.Errorf("the recorder missed the plain part: %q", wire)
	}
	for _, leak := range []string{"MAIL FROM", "RCPT TO", "secret.person"} {
		if strings.Contains(wire, leak) {
			t.Errorf("%q went over the wire in clear", leak)
		}
	}
}

func TestBrokenTLSFallsBackToPlain(t *testing.T) {
	srv := testkit.StartSMTP(t, testkit.SMTPOptions{BreakTLS: true})
	p := newProber(t, srv.Port, nil)
	s, err := p.Open(context.Background(), "d.test", []string{"mx1.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.TLS() {
		t.Error("TLS() = true after a failed handshake")
	}
	if _, class, err := s.Rcpt(context.Background(), "a@d.test"); err != nil || class != smtpprobe.Accepted {
		t.Fatalf("Rcpt = %s, %v", class, err)
	}
	if n := srv.Connections(); n != 2 {
		t.Errorf("%d connections, want 2 (TLS attempt, then plain)", n)
	}
}

func TestNeverSendsDATA(t *testing.T) {
	srv := testkit.StartSMTP(t, testkit.SMTPOptions{StartTLS: true, Rcpt: func(a string) string {
		if strings.HasPrefix(a, "no") {
			return "550 5.1.1 no such user"
		}
		return "250 OK"
	}})
	p := newProber(t, srv.Port, nil)
	ctx := context.Background()
	for range 3 {
		s, err := p.Open(ctx, "d.test", []string{"mx1.test"})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"yes@d.test", "no@d.test", "yes2@d.test"} {
			if _, _, err := s.Rcpt(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
	}
	cmds := srv.Commands()
	if len(cmds) == 0 {
		t.Fatal("no commands recorded")
	}
	for _, c := range cmds {
		verb, _, _ := strings.Cut(c, " ")
		switch strings.ToUpper(verb) {
		case "EHLO", "HELO", "STARTTLS", "MAIL", "RCPT", "QUIT", "RSET":
		default:
			t.Errorf("unexpected command %q", c)
		}
	}
}

// blockingRcpt never answers RCPT until release is closed.
func blockingRcpt(release chan struct{}) func(string) string {
	return func(string) string {
		<-release
		return "250 OK"
	}
}

func TestDeadlines(t *testing.T) {
	silent := testkit.StartSMTP(t, testkit.SMTPOptions{Silent: true})
	t.Run("reply timeout at banner", func(t *testing.T) {
		p := newProber(t, silent.Port, func(c *smtpprobe.Config) { c.ReplyTimeout = 100 * time.Millisecond })
		_, err := p.Open(context.Background(), "d.test", []string{"mx1.test"})
		var pe *smtpprobe.ProbeError
		if !errors.As(err, &pe) || !pe.Timeout {
			t.Fatalf("Open = %v, want a timeout ProbeError", err)
		}
	})
	t.Run("ctx deadline at banner", func(t *testing.T) {
		p := newProber(t, silent.Port, func(c *smtpprobe.Config) { c.ReplyTimeout = time.Hour })
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := p.Open(ctx, "d.test", []string{"mx1.test", "mx1.test"})
		var pe *smtpprobe.ProbeError
		if !errors.As(err, &pe) || !pe.Timeout || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Open = %v, want a timeout ProbeError wrapping context.DeadlineExceeded", err)
		}
	})
	t.Run("ctx cancel at banner", func(t *testing.T) {
		p := newProber(t, silent.Port, func(c *smtpprobe.Config) { c.ReplyTimeout = time.Hour })
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := p.Open(ctx, "d.test", []string{"mx1.test"})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Open = %v, want context.Canceled", err)
		}
	})

	release := make(chan struct{})
	slow := testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: blockingRcpt(release)})
	// Cleanups run last-in first-out: the server's handlers must be
	// released before the server waits for them to end.
	t.Cleanup(func() { close(release) })
	rcptCases := []struct {
		name         string
		replyTimeout time.Duration
		ctx          func() (context.Context, context.CancelFunc)
		want         error
	}{
		{"reply timeout at rcpt", 100 * time.Millisecond, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, nil},
		{"ctx deadline at rcpt", time.Hour, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}, context.DeadlineExceeded},
		{"ctx cancel at rcpt", time.Hour, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	}
	for _, tc := range rcptCases {
		t.Run(tc.name, func(t *testing.T) {
			p := newProber(t, slow.Port, func(c *smtpprobe.Config) { c.ReplyTimeout = tc.replyTimeout })
			s, err := p.Open(context.Background(), "d.test", []string{"mx1.test"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tc.ctx()
			defer cancel()
			_, _, err = s.Rcpt(ctx, "a@d.test")
			if err == nil {
				t.Fatal("Rcpt returned no error from a server that never answers")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Rcpt error %v, want %v", err, tc.want)
			}
			var to interface{ Timeout() bool }
			if tc.want != context.Canceled && (!errors.As(err, &to) || !to.Timeout()) {
				t.Errorf("Rcpt error %v is not a timeout", err)
			}
			if _, _, err := s.Rcpt(context.Background(), "b@d.test"); !errors.Is(err, smtpprobe.ErrBroken) {
				t.Errorf("Rcpt on a broken session = %v, want ErrBroken", err)
			}
			s.Close()
		})
	}
}

func TestPerHostLimit(t *testing.T) {
	srv := testkit.StartSMTP(t, testkit.SMTPOptions{Delay: 5 * time.Millisecond})
	p := newProber(t, srv.Port, func(c *smtpprobe.Config) { c.PerHostLimit = 2 })
	ctx := context.Background()

	// Two sessions hold both slots: a third Open waits until its context
	// gives up, without connecting.
	s1, err := p.Open(ctx, "d.test", []string{"mx1.test"})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := p.Open(ctx, "d.test", []string{"MX1.test."})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = p.Open(wctx, "d.test", []string{"mx1.test"})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third Open = %v, want it to wait for a slot until the deadline", err)
	}
	if n := srv.Connections(); n != 2 {
		t.Fatalf("%d connections while the limit is 2", n)
	}
	s1.Close()
	s3, err := p.Open(ctx, "d.test", []string{"mx1.test"})
	if err != nil {
		t.Fatalf("Open after a slot was freed: %v", err)
	}
	s2.Close()
	s3.Close()

	// Many goroutines: the server never sees more than two at once.
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range 10 {
		wg.Go(func() {
			s, err := p.Open(ctx, "d.test", []string{"mx1.test"})
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			if _, _, err := s.Rcpt(ctx, "a@d.test"); err != nil {
				errs <- err
			}
			_ = i
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := srv.MaxConcurrent(); m != 2 {
		t.Errorf("server saw at most %d concurrent sessions, want 2", m)
	}
}

func TestSMTPUTF8(t *testing.T) {
	const addr = "jösé@d.test"
	tests := []struct {
		name     string
		offer    bool
		mailFrom string
		sent     bool
	}{
		{"offered", true, "MAIL FROM:<verify@" + helo + "> SMTPUTF8", true},
		{"not offered", false, "MAIL FROM:<verify@" + helo + ">", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := testkit.StartSMTP(t, testkit.SMTPOptions{SMTPUTF8: tc.offer})
			p := newProber(t, srv.Port, nil)
			s, err := p.Open(context.Background(), "d.test", []string{"mx1.test"})
			if err != nil {
				t.Fatal(err)
			}
			r, class, err := s.Rcpt(context.Background(), addr)
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			cmds := srv.Commands()
			if !slices.Contains(cmds, tc.mailFrom) {
				t.Errorf("commands %q lack %q", cmds, tc.mailFrom)
			}
			if got := slices.Contains(cmds, "RCPT TO:<"+addr+">"); got != tc.sent {
				t.Errorf("RCPT sent = %v, want %v", got, tc.sent)
			}
			if !tc.sent && (class != smtpprobe.Unknown || r.Code != 0) {
				t.Errorf("unsent RCPT = %+v %s, want a zero reply and unknown", r, class)
			}
			if tc.sent && class != smtpprobe.Accepted {
				t.Errorf("RCPT = %+v %s, want accepted", r, class)
			}
		})
	}
}

func TestRcptRefusesInjection(t *testing.T) {
	srv := testkit.StartSMTP(t, testkit.SMTPOptions{})
	p := newProber(t, srv.Port, nil)
	s, err := p.Open(context.Background(), "d.test", []string{"mx1.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, a := range []string{"a@d.test>\r\nDATA", "a@d.test> NOTIFY=NEVER", "", "a b@d.test"} {
		if _, _, err := s.Rcpt(context.Background(), a); err == nil {
			t.Errorf("Rcpt(%q) was sent", a)
		}
	}
	if _, class, err := s.Rcpt(context.Background(), "ok@d.test"); err != nil || class != smtpprobe.Accepted {
		t.Errorf("session unusable after refused addresses: %s %v", class, err)
	}
}
