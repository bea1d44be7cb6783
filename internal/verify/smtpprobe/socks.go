package smtpprobe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"golang.org/x/net/proxy"
)

// newSOCKS5 returns a dialer that connects through the SOCKS5 proxy at
// proxyURL ("socks5://[user:pass@]host:port"), for runtimes that block
// outbound port 25. It takes only IP addresses, checked against policy, so
// the proxy never resolves a name out of our sight; the proxy itself is
// the operator's and not subject to the policy. Every failure of the proxy
// is ErrExit.
func newSOCKS5(proxyURL string, policy *config.EgressPolicy, timeout time.Duration) (*socksDialer, error) {
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
	var auth *proxy.Auth
	if u.User != nil {
		auth = &proxy.Auth{User: u.User.Username()}
		auth.Password, _ = u.User.Password()
	}
	d, err := proxy.SOCKS5("tcp", u.Host, auth, nil)
	if err != nil {
		return nil, fmt.Errorf("smtpprobe: SOCKS5 dialer: %w", err)
	}
	cd, ok := d.(proxy.ContextDialer)
	if !ok {
		return nil, errors.New("smtpprobe: SOCKS5 dialer does not take a context")
	}
	return &socksDialer{cd, policy, timeout}, nil
}

// socksDialer puts the egress check in front of the SOCKS5 CONNECT.
type socksDialer struct {
	proxy  proxy.ContextDialer
	policy *config.EgressPolicy
	// timeout, when not 0, bounds the handshake up to the reply to
	// CONNECT (within the dial's own deadline).
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

// connect asks the proxy for a connection to target, unchecked, as an
// address (ATYP 1 or 4), never a name. Every failure is ErrExit unless the
// caller cancelled ctx.
func (s *socksDialer) connect(ctx context.Context, target netip.AddrPort) (net.Conn, error) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	c, err := s.proxy.DialContext(ctx, "tcp", target.String())
	if err != nil && !errors.Is(err, context.Canceled) {
		err = fmt.Errorf("%w: %w", ErrExit, err)
	}
	return c, err
}

// ErrExit marks a connection our SMTP exit (the SOCKS5 proxy) did not
// make, for whatever reason: nothing is then known about the receiving
// server, as "host unreachable" from an exit cannot be told from a fault of
// its own route.
var ErrExit = errors.New("smtpprobe: the SMTP exit (SOCKS5 proxy) failed or refused us")

// reply is the proxy's reply to our CONNECT, other than success, in the
// words of the proxy library ("host unreachable"), or "" when err holds
// none.
func reply(err error) string {
	_, r, _ := strings.Cut(err.Error(), "unknown error ")
	return r
}

// aboutServer tells whether err is an exit's reply that it could not
// reach the receiving server (RFC 1928, section 6: network or host
// unreachable, connection refused, TTL expired): no verdict, but no sign
// against the exit's health either, as dead mail servers are common.
func aboutServer(err error) bool {
	return slices.Contains([]string{"network unreachable", "host unreachable", "connection refused", "TTL expired"}, reply(err))
}
