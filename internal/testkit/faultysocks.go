package testkit

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
)

// FaultySOCKS5 is a SOCKS5 exit on loopback that fails as a test tells
// it: it accepts TCP and then stays silent, or answers the greeting (no
// authentication) and then each CONNECT with the reply the test picks,
// or with nothing. A connection it does not answer stays open until the
// client leaves or the test ends, as a stopped host behind a live port
// would hold it.
type FaultySOCKS5 struct {
	// Addr is its host:port.
	Addr string

	mu    sync.Mutex
	conns []net.Conn
}

// SOCKS5Fault is how a FaultySOCKS5 fails.
type SOCKS5Fault struct {
	// Silent: accept the connection and never write.
	Silent bool
	// Reply is the reply code to a CONNECT to target (RFC 1928, section
	// 6); 0 is no reply at all. Nil never replies.
	Reply func(target netip.AddrPort) byte
}

// StartFaultySOCKS5 listens on ip (a loopback address) and fails as f
// says until the test ends.
func StartFaultySOCKS5(t testing.TB, ip string, f SOCKS5Fault) *FaultySOCKS5 {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := &FaultySOCKS5{Addr: ln.Addr().String()}
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			go s.serve(c, f)
		}
	}()
	return s
}

// URL is its socks5:// URL.
func (s *FaultySOCKS5) URL() string { return "socks5://" + s.Addr }

// Connections is how many connections it has accepted.
func (s *FaultySOCKS5) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *FaultySOCKS5) serve(c net.Conn, f SOCKS5Fault) {
	defer c.Close()
	defer io.Copy(io.Discard, c) // hold it until the client leaves
	if f.Silent {
		return
	}
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:2]); err != nil {
		return
	}
	if _, err := io.ReadFull(c, make([]byte, hdr[1])); err != nil {
		return
	}
	if _, err := c.Write([]byte{5, 0}); err != nil {
		return
	}
	if _, err := io.ReadFull(c, hdr[:]); err != nil || hdr[3] != 1 && hdr[3] != 4 {
		return
	}
	raw := make([]byte, map[byte]int{1: 4, 4: 16}[hdr[3]]+2)
	if _, err := io.ReadFull(c, raw); err != nil {
		return
	}
	a, _ := netip.AddrFromSlice(raw[:len(raw)-2])
	target := netip.AddrPortFrom(a, binary.BigEndian.Uint16(raw[len(raw)-2:]))
	if f.Reply == nil {
		return
	}
	if code := f.Reply(target); code != 0 {
		c.Write([]byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0})
	}
}
