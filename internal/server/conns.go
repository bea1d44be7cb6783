package server

import (
	"net"
	"net/netip"
	"sync"
)

// Connections are shared between clients: one client address (an IPv6
// /64) may hold at most an eighth of EVS_MAX_CONNS; a connection past its
// share is closed before a byte of it is read. The trusted proxies are
// exempt: each of their connections carries some other client.

// perClientShare is one client address's share of maxConns connections.
func perClientShare(maxConns int) int { return max(2, maxConns/8) }

// clientListener closes the connections of a client address that holds
// its share already.
type clientListener struct {
	net.Listener
	share   int
	trusted []netip.Prefix

	mu   sync.Mutex
	held map[netip.Prefix]int
}

func newClientListener(ln net.Listener, share int, trusted []netip.Prefix) *clientListener {
	return &clientListener{Listener: ln, share: share, trusted: trusted, held: map[netip.Prefix]int{}}
}

// Accept returns the next connection whose client is within its share.
func (l *clientListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, counted := l.client(c)
		if !counted {
			return c, nil
		}
		l.mu.Lock()
		full := l.held[key] >= l.share
		if !full {
			l.held[key]++
		}
		l.mu.Unlock()
		if full {
			c.Close()
			continue
		}
		return &clientConn{Conn: c, release: func() { l.release(key) }}, nil
	}
}

// client is the key c's client is counted under, and whether it is.
func (l *clientListener) client(c net.Conn) (netip.Prefix, bool) {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Prefix{}, false
	}
	a := ap.Addr().Unmap()
	if isTrusted(a, l.trusted) {
		return netip.Prefix{}, false
	}
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p, true
}

func (l *clientListener) release(key netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[key]--; l.held[key] <= 0 {
		delete(l.held, key)
	}
}

// clientConn gives its client's place back once, when closed.
type clientConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *clientConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
