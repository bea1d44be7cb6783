package smtpprobe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/textproto"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// ErrClosed is returned by Rcpt on a closed session, and
// ErrBroken after an earlier I/O failure left the conversation out of step.
var (
	ErrClosed = errors.New("smtpprobe: session closed")
	ErrBroken = errors.New("smtpprobe: session broken by an earlier failure")
)

// Session is an SMTP conversation past MAIL FROM, ready for RCPT TO
// probes. Its methods may be called from several goroutines; RCPTs are
// sent one at a time.
type Session struct {
	p        *Prober
	host     string
	provider Provider
	raw      net.Conn // the TCP (or proxied) connection, closed to abort reads
	nc       net.Conn // raw, or the TLS connection over it
	r        *bufio.Reader
	w        *textproto.Writer

	tls      bool
	smtputf8 bool
	last     rawReply

	// addr and withTLS are how the session was opened, for the one
	// reconnect after a screening refusal (FirstContactRefusal).
	addr    netip.Addr
	withTLS bool
	// screened is true once that reconnect was made (or Open made it);
	// asked once a RCPT had its reply: only the first may reconnect.
	screened bool
	asked    bool

	mu      sync.Mutex
	broken  bool // an I/O failure or 421: no further commands, no QUIT
	closed  bool
	release func()
}

func newSession(p *Prober, host string, nc net.Conn) *Session {
	s := &Session{p: p, host: host, provider: ProviderOf(host), raw: nc}
	s.setConn(nc)
	return s
}

func (s *Session) setConn(nc net.Conn) {
	s.nc = nc
	s.r = bufio.NewReaderSize(nc, maxLineLen)
	s.w = textproto.NewWriter(bufio.NewWriter(nc))
}

// Host returns the MX host the session talks to, as given to Open.
func (s *Session) Host() string { return s.host }

// TLS reports whether the session was upgraded with STARTTLS.
func (s *Session) TLS() bool { return s.tls }

// Check sends RCPT TO:<address> and reads the reply with the rules of the
// MX host's provider. The error is set only for I/O failures and timeouts
// (then the session is broken); a refusal is a reply with its Reading. A
// non-ASCII address on a server that does not offer SMTPUTF8 is not sent
// (RFC 6531 forbids it): Check returns a zero Reply and Unknown.
func (s *Session) Check(ctx context.Context, address string) (Reply, Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	unknown := Reading{Class: Unknown, Rule: "not_asked"}
	switch {
	case s.closed:
		return Reply{}, unknown, ErrClosed
	case s.broken:
		return Reply{}, unknown, ErrBroken
	case !safeToken(address) || strings.ContainsAny(address, "<>"):
		return Reply{}, unknown, fmt.Errorf("smtpprobe: address cannot be sent in RCPT TO")
	case !s.smtputf8 && !isASCII(address):
		return Reply{}, Reading{Class: Unknown, Rule: "no_smtputf8"}, nil
	}
	rr, err := s.rcpt(ctx, address)
	if err == nil && !s.asked && !s.screened && FirstContactRefusal(rr.reply()) {
		// A screening front (postscreen) refuses a first contact at
		// RCPT and lets the client in when it reconnects. Nothing was
		// asked of the mailbox yet: say goodbye, pause, open a new
		// session with the same address and ask again. Should that
		// fail, the refusal stands: temporary, never a verdict.
		s.screened = true
		if s.reconnect(ctx, rr.code == 421) {
			if !s.smtputf8 && !isASCII(address) {
				s.asked = true
				return Reply{}, Reading{Class: Unknown, Rule: "no_smtputf8"}, nil
			}
			rr, err = s.rcpt(ctx, address)
		}
	}
	s.asked = true
	if err != nil {
		s.broken = true
		return Reply{}, unknown, fmt.Errorf("smtpprobe: %s rcpt: %w", s.host, err)
	}
	if rr.code == 421 {
		s.broken = true
	}
	r, rd := rr.read(StageRcpt, s.provider)
	return r, rd, nil
}

// rcpt sends one RCPT and reads its reply; cancelling ctx closes the
// connection so that the wait ends at once.
func (s *Session) rcpt(ctx context.Context, address string) (rawReply, error) {
	raw := s.raw
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	rr, err := s.cmd(ctx, "RCPT TO:<%s>", address)
	if !stop() && err == nil {
		err = fmt.Errorf("%w: the connection was closed", ctx.Err())
	}
	return rr, err
}

// reconnect replaces the session's connection with a new one to the same
// address, after QUIT (unless hungUp) and ScreenPause, and reports whether
// the new one reached MAIL FROM; when it fails, the session is broken.
// Without room in ctx the old connection is kept.
func (s *Session) reconnect(ctx context.Context, hungUp bool) bool {
	if !s.p.roomToReconnect(ctx) {
		return false
	}
	if !hungUp {
		s.quit()
	}
	s.nc.Close()
	s.broken = true
	if !pause(ctx, s.p.cfg.ScreenPause) {
		return false
	}
	ns, f := s.p.dial(ctx, s.host, s.addr)
	if f != nil {
		return false
	}
	s.raw, s.nc, s.r, s.w = ns.raw, ns.nc, ns.r, ns.w
	s.tls, s.smtputf8, s.withTLS = ns.tls, ns.smtputf8, ns.withTLS
	s.broken = false
	return true
}

func isASCII(s string) bool {
	return !strings.ContainsFunc(s, func(c rune) bool { return c >= utf8.RuneSelf })
}

// Close ends the conversation with QUIT, closes the connection and gives
// the per-host slot back; it is safe to call more than once.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if !s.broken {
		s.quit()
	}
	err := s.nc.Close()
	if s.release != nil {
		s.release()
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// quit says goodbye politely but briefly; its outcome does not matter.
func (s *Session) quit() {
	d := min(s.p.cfg.ReplyTimeout, quitTimeout)
	s.raw.SetDeadline(time.Now().Add(d))
	if s.w.PrintfLine("QUIT") == nil {
		readReply(s.r)
	}
}

// cmd sends one command and reads its reply under the reply deadline.
func (s *Session) cmd(ctx context.Context, format string, args ...any) (rawReply, error) {
	s.setDeadline(ctx)
	if err := s.w.PrintfLine(format, args...); err != nil {
		return rawReply{}, ctxErr(ctx, err)
	}
	rr, err := readReply(s.r)
	if err != nil {
		return rawReply{}, ctxErr(ctx, err)
	}
	return rr, nil
}

// read reads one reply (the banner) under the reply deadline.
func (s *Session) read(ctx context.Context) (rawReply, error) {
	s.setDeadline(ctx)
	rr, err := readReply(s.r)
	return rr, ctxErr(ctx, err)
}

// setDeadline bounds the next exchange by ReplyTimeout and ctx's deadline,
// whichever comes first.
func (s *Session) setDeadline(ctx context.Context) {
	d := time.Now().Add(s.p.cfg.ReplyTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	s.raw.SetDeadline(d)
}

// ctxErr puts ctx's error first when it is why the I/O failed, a timeout
// at or past ctx's deadline included (the read may time out an instant
// before ctx's timer marks it done).
func ctxErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	if cd, ok := ctx.Deadline(); ok && !time.Now().Before(cd) && isTimeout(err) {
		return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
	}
	return err
}
