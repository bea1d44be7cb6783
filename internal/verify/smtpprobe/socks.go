package smtpprobe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"time"

	"github.com/evs-dev/evs/internal/config"
)

// NewSOCKS5Dialer returns a dialer that connects through the SOCKS5 proxy
// at proxyURL ("socks5://host:port", optionally "socks5://user:pass@host:port"),
// reaching the proxy itself with forward (nil: a plain net.Dialer). It is
// how probes leave runtimes that block outbound port 25.
//
// The proxy would resolve names and connect wherever they point, out of
// our sight, so the dialer takes only IP addresses: it checks each against
// policy (nil: no exceptions) and asks the proxy to CONNECT to that
// address, never to a name. A refused address never reaches the proxy.
// The proxy itself is the operator's choice and may be on a private
// network: forward should not apply the policy.
//
// Every failure of the proxy is ErrExit (see there); the handshake is
// bounded by the dial's context.
func NewSOCKS5Dialer(proxyURL string, forward ContextDialer, policy *config.EgressPolicy) (ContextDialer, error) {
	return newSOCKS5(proxyURL, forward, policy, 0)
}

func newSOCKS5(proxyURL string, forward ContextDialer, policy *config.EgressPolicy, timeout time.Duration) (*socksDialer, error) {
	u, err := url.Parse(proxyURL)
	if err != nil {
		// The URL may hold a password: do not echo it.
		return nil, errors.New("smtpprobe: the SOCKS5 proxy URL does not parse")
	}
	if u.Scheme != "socks5" {
		return nil, fmt.Errorf("smtpprobe: proxy scheme %q is not socks5", u.Scheme)
	}
	if u.Hostname() == "" || u.Port() == "" {
		return nil, errors.New("smtpprobe: the SOCKS5 proxy URL needs a host and a port")
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return nil, errors.New("smtpprobe: the SOCKS5 proxy URL has a path or query")
	}
	if u.User != nil {
		if pass, _ := u.User.Password(); len(u.User.Username()) > 255 || len(pass) > 255 {
			return nil, errors.New("smtpprobe: the SOCKS5 user name or password is longer than 255 bytes")
		}
	}
	if forward == nil {
		forward = &net.Dialer{}
	}
	return &socksDialer{addr: u.Host, user: u.User, forward: forward, policy: policy, timeout: timeout}, nil
}

// socksDialer is a SOCKS5 client (RFC 1928, with RFC 1929's user name and
// password) that puts the egress check in front of the CONNECT. Its
// errors name the proxy's address, never the credentials.
type socksDialer struct {
	addr    string // the proxy's host:port
	user    *url.Userinfo
	forward ContextDialer
	policy  *config.EgressPolicy
	// timeout, when not 0, bounds the handshake up to the CONNECT's reply
	// (within the dial's own deadline).
	timeout time.Duration
}

func (s *socksDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("smtpprobe: the SOCKS5 dialer takes an IP address and port, not %q: resolve it first", addr)
	}
	a := ap.Addr().Unmap().WithZone("")
	if err := s.policy.Check(a); err != nil {
		return nil, err
	}
	return s.connect(ctx, netip.AddrPortFrom(a, ap.Port()))
}

// connect opens a connection to target through the proxy, unchecked. Every
// failure is the exit's (ErrExit), a timeout too, unless the caller
// cancelled ctx.
func (s *socksDialer) connect(ctx context.Context, target netip.AddrPort) (net.Conn, error) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	c, err := s.forward.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		err = fmt.Errorf("dial the proxy: %w", err)
	} else if err = s.handshake(ctx, c, target); err != nil {
		c.Close()
	} else {
		return c, nil
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil, fmt.Errorf("SOCKS5 proxy %s: %w", s.addr, err)
	}
	return nil, fmt.Errorf("%w: proxy %s: %w", ErrExit, s.addr, err)
}

// handshake runs socks5 on c within ctx: its deadline, and its end closing
// c.
func (s *socksDialer) handshake(ctx context.Context, c net.Conn, target netip.AddrPort) error {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	err := socks5(c, s.user, target)
	closed := !stop()
	switch {
	case err != nil && ctx.Err() != nil:
		// The I/O error is only the symptom.
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	case closed:
		return ctx.Err()
	case err != nil:
		return err
	}
	return c.SetDeadline(time.Time{})
}

// socks5 negotiates the method, sends the credentials when the proxy asks
// for them, and asks for a connection to target by its address (ATYP 1 or
// 4, never a name).
func socks5(c net.Conn, user *url.Userinfo, target netip.AddrPort) error {
	greeting := []byte{5, 1, 0} // version 5, one method: none
	if user != nil {
		greeting = []byte{5, 2, 0, 2} // none, or user name and password
	}
	if _, err := c.Write(greeting); err != nil {
		return err
	}
	var r [4]byte
	if _, err := io.ReadFull(c, r[:2]); err != nil {
		return fmt.Errorf("no method reply: %w", err)
	}
	switch {
	case r[0] != 5:
		return fmt.Errorf("not a SOCKS5 server (version %d)", r[0])
	case r[1] == 2 && user != nil:
		name := user.Username()
		pass, _ := user.Password()
		msg := append([]byte{1, byte(len(name))}, name...)
		msg = append(append(msg, byte(len(pass))), pass...)
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, r[:2]); err != nil {
			return fmt.Errorf("no authentication reply: %w", err)
		}
		if r[1] != 0 {
			return errors.New("our user name and password were refused")
		}
	case r[1] != 0:
		return fmt.Errorf("no acceptable authentication method (%d)", r[1])
	}
	atyp := byte(1)
	if target.Addr().Is6() {
		atyp = 4
	}
	req := append([]byte{5, 1, 0, atyp}, target.Addr().AsSlice()...)
	if _, err := c.Write(binary.BigEndian.AppendUint16(req, target.Port())); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, r[:]); err != nil {
		return fmt.Errorf("no reply to CONNECT: %w", err)
	}
	if r[0] != 5 {
		return fmt.Errorf("not a SOCKS5 reply to CONNECT (version %d)", r[0])
	}
	if r[1] != 0 {
		return socksReply(r[1])
	}
	// The bound address, which tells nothing we use.
	n := map[byte]int{1: 4, 4: 16}[r[3]]
	if r[3] == 3 {
		if _, err := io.ReadFull(c, r[:1]); err != nil {
			return err
		}
		n = int(r[0])
	} else if n == 0 {
		return fmt.Errorf("unknown address type %d in the reply to CONNECT", r[3])
	}
	_, err := io.ReadFull(c, make([]byte, n+2))
	return err
}

// ErrExit marks a connection our SMTP exit (the SOCKS5 proxy) did not
// make: it could not be reached, reset us, did not answer our handshake
// or CONNECT in time, refused our credentials, or answered the CONNECT
// with any reply but success. Nothing is then known about the receiving
// server (contract, section 16): "host unreachable" from an exit cannot be
// told from a fault of the exit's own route.
var ErrExit = errors.New("smtpprobe: the SMTP exit (SOCKS5 proxy) failed or refused us")

// socksReply is a SOCKS5 reply other than success to our CONNECT.
type socksReply byte

var socksReplies = [...]string{1: "general SOCKS server failure", 2: "connection not allowed by ruleset",
	3: "network unreachable", 4: "host unreachable", 5: "connection refused", 6: "TTL expired",
	7: "command not supported", 8: "address type not supported"}

func (r socksReply) Error() string {
	if int(r) < len(socksReplies) {
		return fmt.Sprintf("CONNECT refused: %s (reply %d)", socksReplies[r], byte(r))
	}
	return fmt.Sprintf("CONNECT refused: reply %d", byte(r))
}

// aboutServer tells whether err is an exit's reply that it could not
// reach the receiving server (network or host unreachable, connection
// refused, TTL expired): no verdict, but no sign against the exit's health
// either, as dead mail servers are common.
func aboutServer(err error) bool {
	var r socksReply
	return errors.As(err, &r) && r >= 3 && r <= 6
}
