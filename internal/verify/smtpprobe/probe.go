// Package smtpprobe asks mail servers whether they accept a mailbox: it
// connects to a domain's MX hosts, walks the SMTP conversation up to RCPT TO
// and classifies the replies. It never sends DATA, so no mail is ever sent.
package smtpprobe

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/config"
)

// ContextDialer opens network connections; *net.Dialer and Exits are ones.
type ContextDialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Resolver resolves MX host names to addresses.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]netip.Addr, error)
}

// Config configures a Prober. HELO is required; the rest have defaults.
type Config struct {
	// HELO is the name we give in EHLO/HELO. It must be a name of ours:
	// there is no default, so that we never speak in someone else's name.
	HELO string
	// MailFrom is the MAIL FROM address; default "verify@" + HELO.
	MailFrom string
	// Port is the port dialled on MX hosts; default 25.
	Port int
	// Resolver resolves MX host names; nil uses net.DefaultResolver.
	Resolver Resolver
	// Dialer opens connections; default a net.Dialer whose Control hook
	// applies Egress, so the address actually dialled is checked again.
	Dialer ContextDialer
	// Egress says which addresses may be dialled; nil refuses every
	// special-purpose range (loopback, private, link-local...) with no
	// exception. Addresses it refuses are skipped before any dial.
	Egress *config.EgressPolicy
	// DialTimeout bounds each connection attempt; default 10s.
	DialTimeout time.Duration
	// ReplyTimeout bounds the wait for each reply; default 30s.
	ReplyTimeout time.Duration
	// PerHostLimit is the most connections open at once to one MX host,
	// across all sessions of the Prober; default 4. Open waits for a slot.
	PerHostLimit int
	// TLSConfig is used for STARTTLS; nil means a config that names the
	// MX host and does not verify its certificate (see New).
	TLSConfig *tls.Config
	// ScreenPause is how long to wait before the one reconnect that
	// follows a screening refusal of a first contact (Postfix's
	// postscreen: see FirstContactRefusal); default 1.5s, negative turns
	// the reconnect off.
	ScreenPause time.Duration
}

// Defaults applied by New.
const (
	DefaultPort         = 25
	DefaultDialTimeout  = 10 * time.Second
	DefaultReplyTimeout = 30 * time.Second
	DefaultPerHostLimit = 4
	DefaultScreenPause  = 1500 * time.Millisecond
)

const (
	// minScreenedSession is the time a reconnect must have left after its
	// pause to be worth making: five round trips, perhaps behind smtpd's
	// lookups of our name.
	minScreenedSession = 2 * time.Second
	// maxAddrsPerHost and maxHostsPerDomain bound one probe's connection
	// attempts, whatever the DNS says.
	maxAddrsPerHost   = 2
	maxHostsPerDomain = 5
)

// quitTimeout bounds the wait for the reply to QUIT: we are leaving, and a
// slow goodbye must not hold a per-host slot for a full ReplyTimeout.
const quitTimeout = 5 * time.Second

// Prober opens probing sessions. It is safe for concurrent use; the
// per-host connection limit is shared by all its sessions.
type Prober struct {
	cfg Config

	mu    sync.Mutex
	slots map[string]*hostSlots
}

// hostSlots is the semaphore of one MX host. users counts holders and
// waiters so that the entry is dropped once nobody needs it, keeping the map
// as small as the set of hosts currently being probed.
type hostSlots struct {
	ch    chan struct{}
	users int
}

// New checks cfg, fills in defaults and returns a Prober.
func New(cfg Config) (*Prober, error) {
	if cfg.HELO == "" {
		return nil, errors.New("smtpprobe: HELO name is required")
	}
	if !safeToken(cfg.HELO) {
		return nil, fmt.Errorf("smtpprobe: HELO name %q is not a host name", cfg.HELO)
	}
	cfg.MailFrom = cmp.Or(cfg.MailFrom, "verify@"+cfg.HELO)
	if !safeToken(cfg.MailFrom) || strings.ContainsAny(cfg.MailFrom, "<>") {
		return nil, fmt.Errorf("smtpprobe: MAIL FROM address %q cannot be sent", cfg.MailFrom)
	}
	cfg.Port = cmp.Or(cfg.Port, DefaultPort)
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("smtpprobe: port %d out of range", cfg.Port)
	}
	if cfg.Resolver == nil {
		cfg.Resolver = netResolver{net.DefaultResolver}
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &net.Dialer{Control: cfg.Egress.Control}
	}
	cfg.DialTimeout = cmp.Or(cfg.DialTimeout, DefaultDialTimeout)
	cfg.ReplyTimeout = cmp.Or(cfg.ReplyTimeout, DefaultReplyTimeout)
	if cfg.DialTimeout < 0 || cfg.ReplyTimeout < 0 {
		return nil, errors.New("smtpprobe: timeouts must be positive")
	}
	cfg.PerHostLimit = cmp.Or(cfg.PerHostLimit, DefaultPerHostLimit)
	if cfg.PerHostLimit < 0 {
		return nil, fmt.Errorf("smtpprobe: per-host limit %d must be positive", cfg.PerHostLimit)
	}
	cfg.ScreenPause = cmp.Or(cfg.ScreenPause, DefaultScreenPause)
	return &Prober{cfg: cfg, slots: make(map[string]*hostSlots)}, nil
}

// safeToken reports whether s can go into a command line as is: no
// spaces, no control characters (a CR or LF would let it smuggle in a
// command of its own).
func safeToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(c rune) bool { return c <= ' ' || c == 0x7f })
}

// netResolver adapts *net.Resolver to Resolver.
type netResolver struct{ r *net.Resolver }

func (n netResolver) LookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	return n.r.LookupNetIP(ctx, "ip", host)
}

// acquire takes one of host's connection slots, waiting while all are in
// use, and returns the function that gives it back.
func (p *Prober) acquire(ctx context.Context, host string) (release func(), err error) {
	p.mu.Lock()
	hs := p.slots[host]
	if hs == nil {
		hs = &hostSlots{ch: make(chan struct{}, p.cfg.PerHostLimit)}
		p.slots[host] = hs
	}
	hs.users++
	p.mu.Unlock()

	select {
	case hs.ch <- struct{}{}:
		return sync.OnceFunc(func() {
			<-hs.ch
			p.leave(host, hs)
		}), nil
	case <-ctx.Done():
		p.leave(host, hs)
		return nil, fmt.Errorf("waiting for a connection slot to %s: %w", host, ctx.Err())
	}
}

func (p *Prober) leave(host string, hs *hostSlots) {
	p.mu.Lock()
	hs.users--
	if hs.users == 0 {
		delete(p.slots, host)
	}
	p.mu.Unlock()
}

// Open connects to the first of hosts (MX host names or IP addresses, in
// preference order, at most maxHostsPerDomain of maxAddrsPerHost
// addresses each) that answers: it dials, reads the banner, says EHLO
// (HELO on a 5xx), upgrades with STARTTLS when offered and sends MAIL
// FROM. An unreachable host, a timeout or a temporary failure makes Open
// try the next; a permanent refusal (Blocked) ends the search, as the
// domain's hosts share their policy about us.
//
// A screening front's refusal of a first contact (FirstContactRefusal)
// gets one reconnect after Config.ScreenPause when ctx leaves room for it.
// Addresses the egress policy refuses are never dialled; when all are, the
// *ProbeError has NotPublic set. The Session holds a per-host slot until
// Closed; without one, the error is a *ProbeError.
func (p *Prober) Open(ctx context.Context, domain string, hosts []string) (*Session, error) {
	if len(hosts) == 0 {
		return nil, &ProbeError{Class: Unknown, Err: fmt.Errorf("no mail hosts given for %s", domain)}
	}
	hosts = hosts[:min(len(hosts), maxHostsPerDomain)]
	var fails, refused []*ProbeError
	screened := false // the one reconnect of this Open is used
	for _, h := range hosts {
		s, f := p.tryHost(ctx, h, &screened)
		if s != nil {
			return s, nil
		}
		if f.refused {
			refused = append(refused, f)
			continue
		}
		fails = append(fails, f)
		// Our exit failed (it saw to its other exits already): the
		// domain's other hosts would find it no better.
		if f.Class == Blocked || ctx.Err() != nil || errors.Is(f.Err, ErrExit) && !aboutServer(f.Err) {
			break
		}
	}
	if len(fails) == 0 {
		f := *refused[0]
		f.NotPublic = true
		f.refused = false
		f.Err = fmt.Errorf("no public address among the mail hosts of %s: %w", domain, f.Err)
		return nil, &f
	}
	// A refused host tells nothing about the domain's reachable ones.
	f := mostTelling(fails)
	f.Exit = !slices.ContainsFunc(fails, func(x *ProbeError) bool { return !errors.Is(x.Err, ErrExit) })
	return nil, f
}

// tryHost attempts a session with one MX host, on each of its addresses
// until one answers. A screening refusal of a first contact is answered
// with one reconnect to the same address, unless *screened says this Open
// has had its one already.
func (p *Prober) tryHost(ctx context.Context, host string, screened *bool) (*Session, *ProbeError) {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	release, err := p.acquire(ctx, name)
	if err != nil {
		return nil, ioFailure(host, err)
	}
	addrs, err := p.resolve(ctx, name)
	if err != nil {
		release()
		return nil, ioFailure(host, fmt.Errorf("resolving %s: %w", host, err))
	}
	addrs, err = p.public(addrs)
	if err != nil {
		release()
		f := ioFailure(host, fmt.Errorf("%s: %w", host, err))
		f.refused = true
		return nil, f
	}
	var fail *ProbeError
	for _, a := range addrs {
		s, f := p.dial(ctx, host, a)
		if f != nil && f.firstContact && !*screened && p.roomToReconnect(ctx) {
			*screened = true
			if pause(ctx, p.cfg.ScreenPause) {
				s, f = p.dial(ctx, host, a)
			}
		}
		if s != nil {
			s.release = release
			// The session's first RCPT must not reconnect again.
			s.screened = *screened
			return s, nil
		}
		fail = f
		if f.Reply.Code != 0 || ctx.Err() != nil {
			// The host answered: its other addresses are the same
			// server and would say the same.
			break
		}
	}
	release()
	return nil, fail
}

// dial opens a session with one address, with STARTTLS when offered, and
// in clear when the TLS handshake fails: many MTAs offer STARTTLS with
// broken TLS stacks; senders then deliver in clear, and so do we.
func (p *Prober) dial(ctx context.Context, host string, a netip.Addr) (*Session, *ProbeError) {
	s, f := p.converse(ctx, host, a, true)
	if f != nil && f.tlsFailed {
		s, f = p.converse(ctx, host, a, false)
	}
	return s, f
}

// FirstContactRefusal reports whether a reply is a screening front's
// refusal of a client it has not seen before, which lets it in when it
// reconnects: Postfix's postscreen, which after its deep protocol tests
// answers every RCPT with "450 4.3.2 Service currently unavailable" (421
// when it also hangs up). It says nothing about the mailbox.
func FirstContactRefusal(r Reply) bool {
	return (r.Code == 450 || r.Code == 421) && r.Enhanced == "4.3.2" &&
		strings.HasPrefix(strings.ToLower(r.Text), "service currently unavailable")
}

// roomToReconnect reports whether a reconnect after a screening refusal
// is to be made: not when it is turned off, nor when ctx's deadline leaves
// no room for the pause and a session after it.
func (p *Prober) roomToReconnect(ctx context.Context) bool {
	if p.cfg.ScreenPause < 0 || ctx.Err() != nil {
		return false
	}
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) >= p.cfg.ScreenPause+minScreenedSession
}

// pause waits d, and reports false when ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// public returns the first maxAddrsPerHost of addrs that the egress
// policy allows, or the refusal of the first when it allows none.
func (p *Prober) public(addrs []netip.Addr) ([]netip.Addr, error) {
	var first error
	out := make([]netip.Addr, 0, maxAddrsPerHost)
	for _, a := range addrs {
		if err := p.cfg.Egress.Check(a); err != nil {
			first = cmp.Or(first, err)
			continue
		}
		if out = append(out, a); len(out) == maxAddrsPerHost {
			break
		}
	}
	if len(out) == 0 {
		return nil, first
	}
	return out, nil
}

// loopback is what RFC 6761 says a localhost name resolves to, without
// asking the DNS (section 6.3).
var loopback = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}

// resolve returns the addresses of host, IPv4 first: outbound IPv6 on
// port 25 is often unroutable, and receivers hold IPv6 senders to stricter
// checks. An IP literal is its own address; a localhost name is loopback.
func (p *Prober) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return loopback, nil
	}
	addrs, err := p.cfg.Resolver.LookupHost(ctx, host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no addresses for %s", host)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, v4 := range []bool{true, false} {
		for _, a := range addrs {
			if a = a.Unmap(); a.Is4() == v4 {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// converse dials one address and walks the conversation up to MAIL FROM.
// withTLS false skips STARTTLS even when offered.
func (p *Prober) converse(ctx context.Context, host string, addr netip.Addr, withTLS bool) (*Session, *ProbeError) {
	// The MX host goes with the dial: a dialer over several SOCKS exits
	// (Exits) picks the exit by the host's provider.
	dctx, cancel := context.WithTimeout(WithMXHost(ctx, host), p.cfg.DialTimeout)
	nc, err := p.cfg.Dialer.DialContext(dctx, "tcp", net.JoinHostPort(addr.String(), strconv.Itoa(p.cfg.Port)))
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, ioFailure(host, fmt.Errorf("dialling %s: %w", host, err))
	}
	s := newSession(p, host, nc)
	s.addr, s.withTLS = addr, withTLS
	// Cancelling ctx must abort a blocked read at once, not at the next
	// deadline: closing the connection does that.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	f := s.handshake(ctx, withTLS)
	if !stop() && f == nil {
		f = ioFailure(host, fmt.Errorf("opening a session with %s: %w", host, ctx.Err()))
	}
	if f != nil {
		if f.Reply.Code != 0 && !s.broken {
			s.quit()
		}
		nc.Close()
		return nil, f
	}
	return s, nil
}

// handshake runs banner, EHLO/HELO, STARTTLS and MAIL FROM.
func (s *Session) handshake(ctx context.Context, withTLS bool) *ProbeError {
	rr, err := s.read(ctx)
	if err != nil {
		return s.ioFail(StageBanner, err)
	}
	if rr.code != 220 {
		return s.replyFail(StageBanner, rr)
	}
	ext, err := s.hello(ctx)
	if err != nil {
		return s.ioFail(StageEHLO, err)
	}
	if ext == nil {
		return s.replyFail(StageEHLO, s.last)
	}
	cfg := s.p.cfg
	if withTLS && ext["STARTTLS"] {
		rr, err := s.cmd(ctx, "STARTTLS")
		if err != nil {
			return s.ioFail(StageEHLO, err)
		}
		// A refused STARTTLS (454 "TLS not available") leaves the
		// plain session usable.
		if rr.code == 220 {
			if err := s.startTLS(ctx, cfg.TLSConfig); err != nil {
				f := s.ioFail(StageEHLO, fmt.Errorf("TLS handshake with %s: %w", s.host, err))
				f.tlsFailed = ctx.Err() == nil
				return f
			}
			if ext, err = s.hello(ctx); err != nil {
				return s.ioFail(StageEHLO, err)
			}
			if ext == nil {
				return s.replyFail(StageEHLO, s.last)
			}
		}
	}
	s.smtputf8 = ext["SMTPUTF8"]
	param := ""
	if s.smtputf8 {
		// Declaring SMTPUTF8 lets non-ASCII recipients follow (RFC 6531);
		// no message is ever sent, so it commits us to nothing.
		param = " SMTPUTF8"
	}
	rr, err = s.cmd(ctx, "MAIL FROM:<%s>%s", cfg.MailFrom, param)
	if err != nil {
		return s.ioFail(StageMail, err)
	}
	if rr.code/100 != 2 {
		return s.replyFail(StageMail, rr)
	}
	return nil
}

// hello says EHLO, falling back to HELO on a 5xx, and returns the
// extensions offered (empty after HELO). On a refusal it returns nil and
// leaves the reply in s.last.
func (s *Session) hello(ctx context.Context) (map[string]bool, error) {
	name := s.p.cfg.HELO
	rr, err := s.cmd(ctx, "EHLO %s", name)
	if err != nil {
		return nil, err
	}
	if rr.code/100 == 5 {
		rr, err = s.cmd(ctx, "HELO %s", name)
		if err != nil {
			return nil, err
		}
		if rr.code/100 == 2 {
			return map[string]bool{}, nil
		}
	}
	if rr.code/100 != 2 {
		s.last = rr
		return nil, nil
	}
	ext := make(map[string]bool, len(rr.lines))
	for _, l := range rr.lines[1:] {
		kw, _, _ := strings.Cut(strings.TrimSpace(l), " ")
		ext[strings.ToUpper(kw)] = true
	}
	return ext, nil
}

// startTLS upgrades the connection after the server's 220 to STARTTLS.
func (s *Session) startTLS(ctx context.Context, base *tls.Config) error {
	var cfg *tls.Config
	if base != nil {
		cfg = base.Clone()
	} else {
		// We only ask whether a mailbox exists and never send a message,
		// and a large share of MX hosts present self-signed, expired or
		// mismatched certificates (RFC 7672 notes opportunistic TLS
		// cannot verify them). Refusing those would push the probe to
		// plain text, which is worse; so we encrypt without verifying.
		cfg = &tls.Config{InsecureSkipVerify: true}
	}
	cfg.ServerName = cmp.Or(cfg.ServerName, strings.TrimSuffix(s.host, "."))
	s.setDeadline(ctx)
	tc := tls.Client(s.raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	s.setConn(tc)
	s.tls = true
	return nil
}

// ioFail records a failure without an SMTP reply (I/O error, timeout,
// malformed reply).
func (s *Session) ioFail(stage string, err error) *ProbeError {
	s.broken = true
	f := ioFailure(s.host, fmt.Errorf("%s %s: %w", s.host, stage, err))
	f.Stage = stage
	return f
}

// replyFail records a failure the server explained with a reply.
func (s *Session) replyFail(stage string, rr rawReply) *ProbeError {
	r, rd := rr.read(stage, s.provider)
	c := rd.Class
	if rr.code == 421 {
		// 421 means the server is closing the channel: no QUIT.
		s.broken = true
	}
	return &ProbeError{Host: s.host, Stage: stage, Reply: r, Class: c, firstContact: FirstContactRefusal(r)}
}

func ioFailure(host string, err error) *ProbeError {
	return &ProbeError{Host: host, Class: Unknown, Timeout: isTimeout(err), Err: err}
}

// isTimeout reports whether err is a timeout: a dial or read deadline, or
// a context deadline (which also reports Timeout).
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
