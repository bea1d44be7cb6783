package smtpprobe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"

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
	return s.proxy.DialContext(ctx, network, netip.AddrPortFrom(a, ap.Port()).String())
}

// forwardDialer gives a ContextDialer the Dial method proxy.Dialer wants;
// the SOCKS5 dialer uses DialContext when present, so deadlines hold.
type forwardDialer struct{ ContextDialer }

func (f forwardDialer) Dial(network, addr string) (net.Conn, error) {
	return f.DialContext(context.Background(), network, addr)
}
