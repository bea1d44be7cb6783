package smtpprobe_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// hosts maps MX names to loopback addresses, standing in for DNS.
type hosts map[string][]netip.Addr

func (h hosts) LookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, ok := h[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func ip(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }

const helo = "probe.evs.test"

// loopbackAllowed is the egress policy of tests whose peers listen on
// loopback, which the default policy refuses.
var loopbackAllowed = func() *config.EgressPolicy {
	p, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		panic(err)
	}
	return p
}()

func newProber(t testing.TB, port int, mod func(*smtpprobe.Config)) *smtpprobe.Prober {
	t.Helper()
	cfg := smtpprobe.Config{
		HELO: helo, Port: port,
		Resolver:     hosts{"mx1.test": ip("127.0.0.1")},
		Egress:       loopbackAllowed,
		DialTimeout:  2 * time.Second,
		ReplyTimeout: 5 * time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := smtpprobe.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRcptOutcomes(t *testing.T) {
	replies := map[string]string{
		"alice@good.test":  "250 2.1.5 OK",
		"nobody@good.test": "550-5.1.1 The email account that you tried to reach does not exist.\n550 5.1.1 https://support.example/NoSuchUser - gsmtp",
		"full@good.test":   "452 4.2.2 Mailbox full",
		"grey@good.test":   "450 4.2.0 Greylisted, see http://postgrey.example/help",
		"many@good.test":   "452 4.5.3 Too many recipients",
		"spam@good.test":   "554 5.7.1 Service unavailable; Client host [127.0.0.1] blocked using zen.spamhaus.org",
	}
	srv := testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: func(a string) string { return replies[a] }})
	p := newProber(t, srv.Port, nil)
	tests := []struct {
		addr     string
		code     int
		enhanced string
		class    smtpprobe.Class
	}{
		{"alice@good.test", 250, "2.1.5", smtpprobe.Accepted},
		{"nobody@good.test", 550, "5.1.1", smtpprobe.Rejected},
		{"full@good.test", 452, "4.2.2", smtpprobe.Full},
		{"grey@good.test", 450, "4.2.0", smtpprobe.Greylisted},
		{"many@good.test", 452, "4.5.3", smtpprobe.RateLimited},
		{"spam@good.test", 554, "5.7.1", smtpprobe.Blocked},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			ctx := context.Background()
			s, err := p.Open(ctx, "good.test", []string{"mx1.test"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Host() != "mx1.test" {
				t.Errorf("Host() = %q", s.Host())
			}
			r, class, err := s.Rcpt(ctx, tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			if r.Code != tc.code || r.Enhanced != tc.enhanced || class != tc.class {
				t.Errorf("Rcpt(%s) = %+v %s, want %d %s %s", tc.addr, r, class, tc.code, tc.enhanced, tc.class)
			}
			if strings.HasPrefix(r.Text, "5.") || strings.HasPrefix(r.Text, "4.") || r.Text == "" {
				t.Errorf("Text %q keeps the enhanced code or is empty", r.Text)
			}
		})
	}
	if n := srv.Connections(); n != len(tests) {
		t.Errorf("server saw %d connections, want %d", n, len(tests))
	}
}

func TestConversation(t *testing.T) {
	srv := testkit.StartSMTP(t, testkit.SMTPOptions{})
	p := newProber(t, srv.Port, func(c *smtpprobe.Config) { c.MailFrom = "bounces@probe.evs.test" })
	ctx := context.Background()
	s, err := p.Open(ctx, "good.test", []string{"mx1.test"})
	if err != nil {
		t.Fatal(err)
	}
	addrs := []string{"a@good.test", "b@good.test", "c@good.test"}
	for _, a := range addrs {
		if _, class, err := s.Rcpt(ctx, a); err != nil || class != smtpprobe.Accepted {
			t.Fatalf("Rcpt(%s) = %s, %v", a, class, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := s.Rcpt(ctx, "d@good.test"); !errors.Is(err, smtpprobe.ErrClosed) {
		t.Errorf("Rcpt after Close = %v, want ErrClosed", err)
	}
	want := []string{
		"EHLO " + helo,
		"MAIL FROM:<bounces@probe.evs.test>",
		"RCPT TO:<a@good.test>", "RCPT TO:<b@good.test>", "RCPT TO:<c@good.test>",
		"QUIT",
	}
	if got := srv.Commands(); !slices.Equal(got, want) {
		t.Errorf("commands:\n got %q\nwant %q", got, want)
	}
	if srv.Connections() != 1 {
		t.Errorf("%d connections, want 1 for all RCPTs", srv.Connections())
	}
}

func TestDefaultMailFrom(t *testing.T) {
	srv := testkit.StartSMTP(t, testkit.SMTPOptions{})
	p := newProber(t, srv.Port, nil)
	s, err := p.Open(context.Background(), "good.test", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !slices.Contains(srv.Commands(), "MAIL FROM:<verify@"+helo+">") {
		t.Errorf("commands %q lack MAIL FROM:<verify@%s>", srv.Commands(), helo)
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		cfg  smtpprobe.Config
	}{
		{"no helo", smtpprobe.Config{}},
		{"helo with space", smtpprobe.Config{HELO: "a b"}},
		{"helo with crlf", smtpprobe.Config{HELO: "a\r\nDATA"}},
		{"mail from with bracket", smtpprobe.Config{HELO: "a.test", MailFrom: "x>@a.test"}},
		{"port", smtpprobe.Config{HELO: "a.test", Port: 70000}},
		{"negative limit", smtpprobe.Config{HELO: "a.test", PerHostLimit: -1}},
		{"negative timeout", smtpprobe.Config{HELO: "a.test", ReplyTimeout: -time.Second}},
	}
	for _, tc := range tests {
		if _, err := smtpprobe.New(tc.cfg); err == nil {
			t.Errorf("%s: New accepted %+v", tc.name, tc.cfg)
		}
	}
}
