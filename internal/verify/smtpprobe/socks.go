package smtpprobe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"

	"golang.org/x/net/proxy"
)

// NewSOCKS5Dialer returns a dialer that connects through the SOCKS5 proxy
// at proxyURL ("socks5://host:port", optionally "socks5://user:pass@host:port"),
// reaching the proxy itself with forward (nil: a plain net.Dialer). It is
// how probes leave runtimes that block outbound port 25.
func NewSOCKS5Dialer(proxyURL string, forward ContextDialer) (ContextDialer, error) {
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
	return cd, nil
}

// forwardDialer gives a ContextDialer the Dial method proxy.Dialer wants;
// the SOCKS5 dialer uses DialContext when present, so deadlines hold.
type forwardDialer struct{ ContextDialer }

func (f forwardDialer) Dial(network, addr string) (net.Conn, error) {
	return f.DialContext(context.Background(), network, addr)
}
