package smtpprobe_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// dialLog is a Dialer that records every address it is asked to dial
// before dialling it with a net.Dialer that applies policy.
type dialLog struct {
	next *net.Dialer
	mu   sync.Mutex
	addr []string
}

func newDialLog(policy *config.EgressPolicy) *dialLog {
	return &dialLog{next: &net.Dialer{Control: policy.Control}}
}

func (d *dialLog) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addr = append(d.addr, addr)
	d.mu.Unlock()
	return d.next.DialContext(ctx, network, addr)
}

func (d *dialLog) dialled() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.addr)
}

func mustPolicy(t *testing.T, allow string) *config.EgressPolicy {
	t.Helper()
	p, err := config.ParseEgress(allow)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEgressRefusesBeforeDialling points MX hosts, in every way a domain
// can, at loopback peers: with the default policy nothing is dialled and
// the error says no address was public; with 127.0.0.0/8 allowed the same
// hosts are probed.
func TestEgressRefusesBeforeDialling(t *testing.T) {
	srvs, port := farm(t, testkit.SMTPOptions{IP: "127.0.2.1"}, testkit.SMTPOptions{IP: "127.0.0.1"})
	res := hosts{
		"mx.test":     ip("127.0.2.1"),
		"mapped.test": ip("::ffff:127.0.2.1"),
		"meta.test":   ip("169.254.169.254"),
		"v6.test":     ip("::1"),
		"ula.test":    ip("fd00::25"),
		"many.test":   {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("192.168.1.1"), netip.MustParseAddr("100.64.0.1"), netip.MustParseAddr("127.0.2.1")},
	}
	tests := []struct {
		host      string
		reachable bool // with 127.0.0.0/8 allowed
	}{
		{"mx.test", true},
		{"MX.TEST.", true},
		{"mapped.test", true},
		{"127.0.2.1", true},
		{"[127.0.2.1]", true},
		{"::ffff:127.0.2.1", true},
		{"localhost", true},
		{"localhost.", true},
		{"mx.localhost", true},
		{"many.test", true},
		{"meta.test", false},
		{"v6.test", false},
		{"ula.test", false},
		{"169.254.169.254", false},
		{"[::1]", false},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			before := srvs[0].Connections() + srvs[1].Connections()
			for _, policy := range []*config.EgressPolicy{nil, mustPolicy(t, "")} {
				dl := newDialLog(policy)
				p := newProber(t, port, func(c *smtpprobe.Config) { c.Resolver, c.Dialer, c.Egress = res, dl, policy })
				s, err := p.Open(context.Background(), "d.test", []string{tc.host})
				if err == nil {
					s.Close()
					t.Fatalf("Open succeeded on %s with the default policy", s.Host())
				}
				var pe *smtpprobe.ProbeError
				if !errors.As(err, &pe) || !pe.NotPublic || !errors.Is(err, config.ErrEgressRefused) {
					t.Errorf("error %v (%+v), want a NotPublic *ProbeError wrapping ErrRefused", err, pe)
				}
				if d := dl.dialled(); len(d) != 0 {
					t.Errorf("dialled %v", d)
				}
			}
			if n := srvs[0].Connections() + srvs[1].Connections(); n != before {
				t.Errorf("the peers got %d connections", n-before)
			}

			allowed := mustPolicy(t, "127.0.0.0/8")
			dl := newDialLog(allowed)
			p := newProber(t, port, func(c *smtpprobe.Config) { c.Resolver, c.Dialer, c.Egress = res, dl, allowed })
			s, err := p.Open(context.Background(), "d.test", []string{tc.host})
			if !tc.reachable {
				if err == nil {
					s.Close()
					t.Fatalf("Open succeeded on %s; 127.0.0.0/8 does not allow it", tc.host)
				}
				if d := dl.dialled(); len(d) != 0 {
					t.Errorf("dialled %v", d)
				}
				return
			}
			if err != nil {
				t.Fatalf("with 127.0.0.0/8 allowed: %v (dialled %v)", err, dl.dialled())
			}
			s.Close()
			for _, a := range dl.dialled() {
				if ap := netip.MustParseAddrPort(a); !ap.Addr().Is4() || !ap.Addr().IsLoopback() {
					t.Errorf("dialled %s", a)
				}
			}
		})
	}
}

// TestEgressSkipsRefusedHosts checks that refused hosts and addresses are
// passed over for the allowed ones, and that a domain with both refused
// and unreachable hosts is reported as unreachable, not as not public.
func TestEgressSkipsRefusedHosts(t *testing.T) {
	srvs, port := farm(t, testkit.SMTPOptions{IP: "127.0.2.1"})
	policy := mustPolicy(t, "127.0.2.0/24")
	res := hosts{
		"private.test": ip("127.0.3.9"),
		"dead.test":    ip("127.0.2.200"), // allowed, nothing listens
		"good.test":    ip("127.0.2.1"),
		"mixed.test":   {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("127.0.3.9"), netip.MustParseAddr("127.0.2.1")},
	}
	p := func(dl *dialLog) *smtpprobe.Prober {
		return newProber(t, port, func(c *smtpprobe.Config) { c.Resolver, c.Dialer, c.Egress = res, dl, policy })
	}
	good := fmt.Sprintf("127.0.2.1:%d", port)

	for _, hs := range [][]string{{"private.test", "good.test"}, {"mixed.test"}} {
		dl := newDialLog(policy)
		s, err := p(dl).Open(context.Background(), "d.test", hs)
		if err != nil {
			t.Fatalf("%v: %v", hs, err)
		}
		s.Close()
		if d := dl.dialled(); !slices.Equal(d, []string{good}) {
			t.Errorf("%v: dialled %v, want only %s", hs, d, good)
		}
	}
	if srvs[0].Connections() != 2 {
		t.Errorf("the good host got %d connections, want 2", srvs[0].Connections())
	}

	dl := newDialLog(policy)
	_, err := p(dl).Open(context.Background(), "d.test", []string{"private.test", "dead.test", "private.test"})
	var pe *smtpprobe.ProbeError
	if !errors.As(err, &pe) || pe.NotPublic || pe.Host != "dead.test" || errors.Is(err, config.ErrEgressRefused) {
		t.Errorf("refused + unreachable: %v (%+v), want the unreachable host's failure", err, pe)
	}
	if d := dl.dialled(); len(d) != 1 {
		t.Errorf("dialled %v, want the dead host only", d)
	}
}

// TestBoundedAttempts gives a domain 30 MX hosts of 3 addresses each,
// none answering: at most 5 hosts, in the order given, and 2 addresses of
// each are dialled.
func TestBoundedAttempts(t *testing.T) {
	res := hosts{}
	var mxs, want []string
	for i := range 30 {
		name := fmt.Sprintf("mx%02d.test", i)
		mxs = append(mxs, name)
		for j := range 3 {
			a := netip.AddrFrom4([4]byte{127, 0, 5, byte(3*i + j + 1)})
			res[name] = append(res[name], a)
			if i < 5 && j < 2 {
				want = append(want, netip.AddrPortFrom(a, 2525).String())
			}
		}
	}
	policy := mustPolicy(t, "127.0.0.0/8")
	dl := newDialLog(policy)
	p := newProber(t, 2525, func(c *smtpprobe.Config) { c.Resolver, c.Dialer, c.Egress = res, dl, policy })
	if _, err := p.Open(context.Background(), "d.test", mxs); err == nil {
		t.Fatal("Open succeeded with nothing listening")
	}
	if d := dl.dialled(); !slices.Equal(d, want) {
		t.Errorf("dialled %d addresses %v\nwant %d: %v", len(d), d, len(want), want)
	}
}

// socksProxy is a minimal SOCKS5 server (RFC 1928, no authentication,
// CONNECT only) that records each request and relays to the target.
type socksProxy struct {
	addr string

	mu       sync.Mutex
	conns    int
	requests []socksRequest
}

type socksRequest struct {
	atyp byte   // 1 IPv4, 3 domain name, 4 IPv6
	host string // the address or name asked for
	port uint16
}

func startSOCKS5(t *testing.T) *socksProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sp := &socksProxy{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var open sync.Map
	t.Cleanup(func() {
		ln.Close()
		open.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			sp.mu.Lock()
			sp.conns++
			sp.mu.Unlock()
			open.Store(c, nil)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				sp.serve(c, &open)
			}()
		}
	}()
	return sp
}

func (sp *socksProxy) serve(c net.Conn, open *sync.Map) {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:2]); err != nil || hdr[0] != 5 {
		return
	}
	if _, err := io.ReadFull(c, make([]byte, hdr[1])); err != nil {
		return
	}
	if _, err := c.Write([]byte{5, 0}); err != nil {
		return
	}
	if _, err := io.ReadFull(c, hdr[:]); err != nil || hdr[1] != 1 {
		return
	}
	req := socksRequest{atyp: hdr[3]}
	var raw []byte
	switch hdr[3] {
	case 1:
		raw = make([]byte, 4)
	case 4:
		raw = make([]byte, 16)
	case 3:
		var n [1]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		raw = make([]byte, n[0])
	default:
		return
	}
	var port [2]byte
	if _, err := io.ReadFull(c, raw); err != nil {
		return
	}
	if _, err := io.ReadFull(c, port[:]); err != nil {
		return
	}
	req.port = binary.BigEndian.Uint16(port[:])
	if hdr[3] == 3 {
		req.host = string(raw)
	} else {
		a, _ := netip.AddrFromSlice(raw)
		req.host = a.String()
	}
	sp.mu.Lock()
	sp.requests = append(sp.requests, req)
	sp.mu.Unlock()
	if hdr[3] == 3 {
		c.Write([]byte{5, 8, 0, 1, 0, 0, 0, 0, 0, 0}) // address type not supported
		return
	}
	target, err := net.DialTimeout("tcp", net.JoinHostPort(req.host, fmt.Sprint(req.port)), 2*time.Second)
	if err != nil {
		c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0}) // connection refused
		return
	}
	open.Store(target, nil)
	defer target.Close()
	if _, err := c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}); err != nil {
		return
	}
	go func() { io.Copy(target, c); target.Close() }()
	io.Copy(c, target)
}

func (sp *socksProxy) seen() (int, []socksRequest) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.conns, slices.Clone(sp.requests)
}

func TestSOCKS5ConnectsByCheckedAddress(t *testing.T) {
	srvs, port := farm(t, testkit.SMTPOptions{IP: "127.0.2.1"})
	res := hosts{"mx.test": ip("127.0.2.1"), "mapped.test": ip("::ffff:127.0.2.1")}
	allowed := mustPolicy(t, "127.0.0.0/8")

	t.Run("allowed: CONNECT by IPv4 address", func(t *testing.T) {
		sp := startSOCKS5(t)
		d, err := smtpprobe.NewSOCKS5Dialer("socks5://"+sp.addr, allowed)
		if err != nil {
			t.Fatal(err)
		}
		p := newProber(t, port, func(c *smtpprobe.Config) { c.Resolver, c.Dialer, c.Egress = res, d, allowed })
		for _, h := range []string{"mx.test", "mapped.test"} {
			s, err := p.Open(context.Background(), "d.test", []string{h})
			if err != nil {
				t.Fatalf("%s: %v", h, err)
			}
			if _, class, err := s.Rcpt(context.Background(), "a@d.test"); err != nil || class != smtpprobe.Accepted {
				t.Errorf("%s: Rcpt = %s, %v", h, class, err)
			}
			s.Close()
		}
		want := socksRequest{atyp: 1, host: "127.0.2.1", port: uint16(port)}
		if _, reqs := sp.seen(); !slices.Equal(reqs, []socksRequest{want, want}) {
			t.Errorf("proxy requests %+v, want two of %+v", reqs, want)
		}
		if srvs[0].Connections() != 2 {
			t.Errorf("the peer got %d connections through the proxy, want 2", srvs[0].Connections())
		}
	})

	t.Run("refused: the proxy is never contacted", func(t *testing.T) {
		sp := startSOCKS5(t)
		before := srvs[0].Connections()
		for _, tc := range []struct {
			name                 string
			prober, dialerPolicy *config.EgressPolicy
		}{
			{"default policy", nil, nil},
			// The dialer checks on its own even when its caller did not.
			{"dialer's policy alone", allowed, nil},
		} {
			d, err := smtpprobe.NewSOCKS5Dialer("socks5://"+sp.addr, tc.dialerPolicy)
			if err != nil {
				t.Fatal(err)
			}
			p := newProber(t, port, func(c *smtpprobe.Config) { c.Resolver, c.Dialer, c.Egress = res, d, tc.prober })
			for _, h := range []string{"mx.test", "mapped.test", "127.0.2.1", "localhost"} {
				if s, err := p.Open(context.Background(), "d.test", []string{h}); err == nil {
					s.Close()
					t.Errorf("%s: Open(%s) succeeded", tc.name, h)
				}
			}
		}
		if n, reqs := sp.seen(); n != 0 {
			t.Errorf("the proxy got %d connections, requests %+v", n, reqs)
		}
		if srvs[0].Connections() != before {
			t.Error("the peer was reached")
		}
	})

	t.Run("names are never handed to the proxy", func(t *testing.T) {
		sp := startSOCKS5(t)
		d, err := smtpprobe.NewSOCKS5Dialer("socks5://"+sp.addr, allowed)
		if err != nil {
			t.Fatal(err)
		}
		for _, addr := range []string{"mx.test:25", "localhost:25", "example.com:25"} {
			if c, err := d.DialContext(context.Background(), "tcp", addr); err == nil {
				c.Close()
				t.Errorf("DialContext(%s) succeeded", addr)
			}
		}
		_, err = d.DialContext(context.Background(), "tcp", "169.254.169.254:80")
		if !errors.Is(err, config.ErrEgressRefused) {
			t.Errorf("metadata address: %v, want ErrRefused", err)
		}
		if n, reqs := sp.seen(); n != 0 {
			t.Errorf("the proxy got %d connections, requests %+v", n, reqs)
		}
	})
}
