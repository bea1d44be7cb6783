package smtpprobe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	"github.com/evs-dev/evs/internal/config"
	"golang.org/x/net/proxy"
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
func NewSOCKS5Dialer(proxyURL string, forward ContextDialer, policy *config.EgressPolicy) (ContextDialer, error) {
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
	if forward == nil {
		forward = &net.Dialer{}
	}
	d, err := proxy.SOCKS5("tcp", u.Host, auth, forwardDialer{forward})
	if err != nil {
		return nil, fmt.Errorf("smtpprobe: SOCKS5 dialer: %w", err)
	}
	cd, ok := d.(proxy.ContextDialer)
	if !ok {
		return nil, errors.New("smtpprobe: SOCKS5 dialer does not take a context")
	}
	return socksDialer{cd, policy}, nil
}

// socksDialer puts the egress check in front of the SOCKS5 CONNECT.
type socksDialer struct {
	proxy  proxy.ContextDialer
	policy *config.EgressPolicy
}

func (s socksDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("smtpprobe: the SOCKS5 dialer takes an IP address and port, not %q: resolve it first", addr)
	}
	a := ap.Addr().Unmap().WithZone("")
	if err := s.policy.Check(a); err != nil {
		return nil, err
	}
	// A canonical literal makes the proxy library send an address
	// (ATYP 1 or 4), never a domain name (ATYP 3).
	c, err := s.proxy.DialContext(ctx, network, netip.AddrPortFrom(a, ap.Port()).String())
	if err != nil && exitFault(err) {
		return nil, fmt.Errorf("%w: %w", ErrExit, err)
	}
	return c, err
}

// ErrExit marks a connection our SMTP exit (the SOCKS5 proxy) could not
// make for reasons of its own: unreachable, refusing our handshake or
// credentials, or refusing us by its rules. Nothing is then known about
// the receiving server (contract, section 16).
var ErrExit = errors.New("smtpprobe: the SMTP exit (SOCKS5 proxy) could not be reached or refused us")

// targetReplies are the SOCKS5 replies about the receiving server (RFC
// 1928, section 6: network or host unreachable, connection refused, TTL
// expired), in the text the proxy library gives them: the exit worked,
// the server did not.
var targetReplies = []string{"unknown error network unreachable", "unknown error host unreachable",
	"unknown error connection refused", "unknown error TTL expired"}

// exitFault tells whether a failed CONNECT through the proxy is the
// proxy's own failure rather than the receiving server's. A timeout is not
// counted: a silent server and a slow exit cannot be told apart.
func exitFault(err error) bool {
	if isTimeout(err) || errors.Is(err, context.Canceled) {
		return false
	}
	msg := err.Error()
	for _, r := range targetReplies {
		if strings.HasSuffix(msg, r) {
			return false
		}
	}
	return true
}

// forwardDialer gives a ContextDialer the Dial method proxy.Dialer wants;
// the SOCKS5 dialer uses DialContext when present, so deadlines hold.
type forwardDialer struct{ ContextDialer }

func (f forwardDialer) Dial(network, addr string) (net.Conn, error) {
	return f.DialContext(context.Background(), network, addr)
}
