package smtpprobe_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// The loopback addresses the two exits of these tests connect out from:
// no other test uses them.
const exitA, exitB = "127.0.0.41", "127.0.0.42"

// twoExits starts two real Dante servers and an Exits over them.
func twoExits(t *testing.T, mod func(*smtpprobe.ExitsConfig)) (*smtpprobe.Exits, [2]*testkit.Dante) {
	t.Helper()
	ds := [2]*testkit.Dante{testkit.StartDante(t, exitA), testkit.StartDante(t, exitB)}
	list := ds[0].URL() + "#" + exitA + "," + ds[1].URL() + "#" + exitB
	exits, err := config.ParseSMTPExits(list)
	if err != nil {
		t.Fatal(err)
	}
	cfg := smtpprobe.ExitsConfig{Exits: exits, Policy: loopbackAllowed, Retry: 100 * time.Millisecond, Timeout: time.Second}
	if mod != nil {
		mod(&cfg)
	}
	x, err := smtpprobe.NewExits(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x, ds
}

// hostsOn returns one MX host name whose provider goes to exit 0 and one
// whose goes to exit 1, and a resolver putting both on 127.0.0.1.
func hostsOn(t *testing.T, x *smtpprobe.Exits) ([2]string, hosts) {
	t.Helper()
	var on [2]string
	res := hosts{}
	for i := 0; i < 100 && (on[0] == "" || on[1] == ""); i++ {
		h := fmt.Sprintf("mx.p%d.example", i)
		if e := x.For(h); on[e] == "" {
			on[e] = h
			res[h] = ip("127.0.0.1")
		}
	}
	if on[0] == "" || on[1] == "" {
		t.Fatalf("100 providers all on one exit: %q", on)
	}
	return on, res
}

// through opens a session to host and returns the address the peer saw it
// come from, or the failure.
func through(t *testing.T, p *smtpprobe.Prober, peer *testkit.SMTPServer, host string) (string, error) {
	t.Helper()
	n := len(peer.Clients())
	s, err := p.Open(context.Background(), "example", []string{host})
	if err != nil {
		return "", err
	}
	s.Close()
	c := peer.Clients()
	if len(c) != n+1 {
		t.Fatalf("%s: the peer saw %d new connections, want 1", host, len(c)-n)
	}
	return c[n], nil
}

// TestExitsPerProviderAndFailover: two providers spread over two real
// SOCKS exits, each sticking to its own; one exit stopped, its provider
// first gets our failure (no verdict: Exit), then moves to the other
// exit; the exit started again, the provider comes back to it.
func TestExitsPerProviderAndFailover(t *testing.T) {
	var (
		mu      sync.Mutex
		changes []string
	)
	x, ds := twoExits(t, func(c *smtpprobe.ExitsConfig) {
		c.Observe = func(i int, name string, up bool) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, fmt.Sprint(i, up))
		}
	})
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{})
	on, res := hostsOn(t, x)
	p := newProber(t, peer.Port, func(c *smtpprobe.Config) { c.Resolver, c.Dialer = res, x })

	for round := 0; round < 3; round++ {
		for i, want := range []string{exitA, exitB} {
			if from, err := through(t, p, peer, on[i]); err != nil || from != want {
				t.Fatalf("round %d: %s came from %q (%v), want %s", round, on[i], from, err, want)
			}
		}
	}

	ds[0].Stop()
	// The first fault is our failure, never a server's answer.
	_, err := through(t, p, peer, on[0])
	var pe *smtpprobe.ProbeError
	if !errors.As(err, &pe) || !pe.Exit || !errors.Is(pe.Err, smtpprobe.ErrExit) {
		t.Fatalf("exit A stopped, first try: %v, want an exit failure", err)
	}
	// The second takes A out of rotation and goes through B at once.
	for i := range on {
		if from, err := through(t, p, peer, on[i]); err != nil || from != exitB {
			t.Fatalf("exit A out: %s came from %q (%v), want %s", on[i], from, err, exitB)
		}
	}
	if st := x.Status(); st[0].Up || st[0].Detail == "" || !st[1].Up || st[0].Name != "127.0.0.1:"+fmt.Sprint(ds[0].Port) {
		t.Fatalf("status with A out: %+v", st)
	}

	ds[0].Start()
	testkit.EventuallyEvery(t, 10*time.Second, 50*time.Millisecond, func() error {
		from, err := through(t, p, peer, on[0])
		if err != nil {
			t.Fatalf("while A comes back: %v", err)
		}
		if from != exitA {
			return fmt.Errorf("exit A started again: %s still comes from %s", on[0], from)
		}
		return nil
	})
	if from, err := through(t, p, peer, on[1]); err != nil || from != exitB {
		t.Fatalf("after A's return: %s came from %q (%v), want %s", on[1], from, err, exitB)
	}
	if st := x.Status(); !st[0].Up || !st[1].Up {
		t.Fatalf("status after A's return: %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(changes) != "[0 false 0 true]" {
		t.Errorf("health changes told: %v, want A out then back", changes)
	}
}

// TestExitsAllOut: with every exit stopped the dial is our failure
// (ErrExit), and a health probe brings an exit back.
func TestExitsAllOut(t *testing.T) {
	x, ds := twoExits(t, nil)
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{})
	on, res := hostsOn(t, x)
	p := newProber(t, peer.Port, func(c *smtpprobe.Config) { c.Resolver, c.Dialer = res, x })
	ds[0].Stop()
	ds[1].Stop()
	x.Probe(context.Background())
	if st := x.Status(); st[0].Up || st[1].Up {
		t.Fatalf("both stopped, after a probe: %+v", st)
	}
	for _, h := range on {
		_, err := through(t, p, peer, h)
		var pe *smtpprobe.ProbeError
		if !errors.As(err, &pe) || !pe.Exit {
			t.Fatalf("%s with every exit out: %v, want an exit failure", h, err)
		}
	}
	ds[1].Start()
	x.Probe(context.Background())
	if st := x.Status(); st[0].Up || !st[1].Up {
		t.Fatalf("B started, after a probe: %+v", st)
	}
	for _, h := range on {
		if from, err := through(t, p, peer, h); err != nil || from != exitB {
			t.Fatalf("only B up: %s came from %q (%v)", h, from, err)
		}
	}
}

// TestExitsAvoid: an exit avoided for a provider (its blocked share is
// high) takes none of its sessions while another exit is in rotation,
// and is not among those Order offers it; a dial asked to go through an
// exit (WithExit) does.
func TestExitsAvoid(t *testing.T) {
	avoidA := map[string]bool{}
	x, _ := twoExits(t, func(c *smtpprobe.ExitsConfig) {
		c.Avoid = func(i int, host string) bool { return i == 0 && avoidA[host] }
	})
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{})
	on, res := hostsOn(t, x)
	p := newProber(t, peer.Port, func(c *smtpprobe.Config) { c.Resolver, c.Dialer = res, x })
	avoidA[on[0]] = true
	for i := range on {
		if from, err := through(t, p, peer, on[i]); err != nil || from != exitB {
			t.Fatalf("A avoided for %s: %s came from %q (%v), want %s", on[0], on[i], from, err, exitB)
		}
	}
	if x.For(on[0]) != 1 {
		t.Fatalf("For(%s) = %d, want 1", on[0], x.For(on[0]))
	}
	// The exits a provider's sessions may take: an avoided one is not,
	// the others in the provider's order.
	st := x.Status()
	if o := x.Order(on[0]); fmt.Sprint(o) != fmt.Sprint([]string{st[1].Name}) {
		t.Fatalf("Order(%s) = %v with A avoided for it", on[0], o)
	}
	if o := x.Order(on[1]); fmt.Sprint(o) != fmt.Sprint([]string{st[1].Name, st[0].Name}) {
		t.Fatalf("Order(%s) = %v, want B then A", on[1], o)
	}
	// A session admitted on A's budget goes through A, whatever its
	// provider prefers.
	n := len(peer.Clients())
	s, err := p.Open(smtpprobe.WithExit(context.Background(), st[0].Name), "example", []string{on[1]})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if c := peer.Clients(); len(c) != n+1 || c[n] != exitA {
		t.Fatalf("WithExit(A): the peer saw %v", c[n:])
	}
}

// fakeSOCKS answers each connection with reply to the method greeting
// and, if the client goes on, authFail to its credentials.
func fakeSOCKS(t *testing.T, reply []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 512)
				c.Read(buf) // the greeting
				c.Write(reply)
				c.Read(buf) // the credentials, if sent
				c.Write([]byte{1, 1})
			}()
		}
	}()
	return ln.Addr().String()
}

// TestExitsProbe: the health probe is a CONNECT through the exit, with
// its credentials (no canary: to the exit's own loopback, any reply
// passes). A real Dante that takes no authentication passes; a proxy
// refusing our credentials, not speaking SOCKS5, or answering the
// greeting but never a CONNECT is out of rotation, and the detail never
// quotes the password.
func TestExitsProbe(t *testing.T) {
	d := testkit.StartDante(t, exitA)
	hangs := testkit.StartFaultySOCKS5(t, "127.0.0.1", testkit.SOCKS5Fault{})
	for _, c := range []struct {
		name, addr, detail string
	}{
		{"Dante, offered credentials, picks none", fmt.Sprintf("127.0.0.1:%d", d.Port), ""},
		{"answers the greeting, never a CONNECT", hangs.Addr, "i/o timeout"},
		{"credentials refused", fakeSOCKS(t, []byte{5, 2}), "authentication failed"},
		{"no acceptable method", fakeSOCKS(t, []byte{5, 0xff}), "no acceptable authentication method"},
		{"not SOCKS5", fakeSOCKS(t, []byte("HTTP/1.1 400 Bad Request\r\n")), "unexpected protocol version"},
		{"nothing listening", "127.0.0.1:1", "dial tcp"},
	} {
		t.Run(c.name, func(t *testing.T) {
			exits, err := config.ParseSMTPExits("socks5://evs:s3cret@" + c.addr)
			if err != nil {
				t.Fatal(err)
			}
			x, err := smtpprobe.NewExits(smtpprobe.ExitsConfig{Exits: exits, Policy: loopbackAllowed, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			x.Probe(context.Background())
			st := x.Status()[0]
			if st.Up != (c.detail == "") || !strings.Contains(st.Detail, c.detail) || strings.Contains(st.Detail, "s3cret") {
				t.Fatalf("%+v, want up %v and a detail saying %q", st, c.detail == "", c.detail)
			}
		})
	}
}

// refuse answers the CONNECT to every target with code.
func refuse(code byte) func(netip.AddrPort) byte {
	return func(netip.AddrPort) byte { return code }
}

// TestSOCKS5EveryFaultIsTheExits: every way a SOCKS5 exit fails is ours
// (ErrExit: no verdict), never the receiving server's: nothing listening,
// a reset, a silent exit, one that answers the greeting and never the
// CONNECT (both bounded by the dial's time), and every reply to CONNECT
// but success, the known ones (1 to 8: "host unreachable" from an exit
// cannot be told from its own route's fault) and unknown ones.
func TestSOCKS5EveryFaultIsTheExits(t *testing.T) {
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	resets, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resets.Close() })
	go func() {
		for {
			c, err := resets.Accept()
			if err != nil {
				return
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	cases := map[string]string{
		"nothing listening":                     closed,
		"reset":                                 resets.Addr().String(),
		"silent":                                testkit.StartFaultySOCKS5(t, "127.0.0.1", testkit.SOCKS5Fault{Silent: true}).Addr,
		"answers the greeting, never a CONNECT": testkit.StartFaultySOCKS5(t, "127.0.0.1", testkit.SOCKS5Fault{}).Addr,
	}
	for _, code := range []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 0xff} {
		cases[fmt.Sprint("reply ", code)] = testkit.StartFaultySOCKS5(t, "127.0.0.1", testkit.SOCKS5Fault{Reply: refuse(code)}).Addr
	}
	for name, addr := range cases {
		t.Run(name, func(t *testing.T) {
			d, err := smtpprobe.NewSOCKS5Dialer("socks5://"+addr, loopbackAllowed)
			if err != nil {
				t.Fatal(err)
			}
			p := newProber(t, peer.Port, func(c *smtpprobe.Config) { c.Dialer, c.DialTimeout = d, 300*time.Millisecond })
			s, err := p.Open(context.Background(), "example", []string{"mx1.test"})
			var pe *smtpprobe.ProbeError
			if err == nil {
				s.Close()
			}
			if !errors.As(err, &pe) || !pe.Exit || !errors.Is(err, smtpprobe.ErrExit) {
				t.Fatalf("Open: %v, want our exit's failure", err)
			}
		})
	}
	if n := len(peer.Clients()); n != 0 {
		t.Fatalf("the mail server saw %d connections", n)
	}
}

// TestExitsHungLeavesAtOnce: an exit that hangs (silent, or answering the
// greeting and never the CONNECT) leaves the rotation with its first
// timed-out connection, whose dial goes through the provider's next exit
// (a real Dante) at once; the provider's sessions then all go there.
func TestExitsHungLeavesAtOnce(t *testing.T) {
	for name, fault := range map[string]testkit.SOCKS5Fault{
		"silent":                                {Silent: true},
		"answers the greeting, never a CONNECT": {},
	} {
		t.Run(name, func(t *testing.T) {
			hung := testkit.StartFaultySOCKS5(t, exitA, fault)
			d := testkit.StartDante(t, exitB)
			exits, err := config.ParseSMTPExits(hung.URL() + "," + d.URL() + "#" + exitB)
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu      sync.Mutex
				changes []string
			)
			x, err := smtpprobe.NewExits(smtpprobe.ExitsConfig{Exits: exits, Policy: loopbackAllowed,
				Timeout: 300 * time.Millisecond, Retry: time.Hour,
				Observe: func(i int, _ string, up bool) {
					mu.Lock()
					defer mu.Unlock()
					changes = append(changes, fmt.Sprint(i, up))
				}})
			if err != nil {
				t.Fatal(err)
			}
			peer := testkit.StartSMTP(t, testkit.SMTPOptions{})
			on, res := hostsOn(t, x)
			p := newProber(t, peer.Port, func(c *smtpprobe.Config) { c.Resolver, c.Dialer = res, x })
			for round := range 3 {
				if from, err := through(t, p, peer, on[0]); err != nil || from != exitB {
					t.Fatalf("round %d: %s came from %q (%v), want %s", round, on[0], from, err, exitB)
				}
			}
			// The dial and the health probe that confirmed the hang.
			if n := hung.Connections(); n != 2 {
				t.Fatalf("the hung exit saw %d connections, want 2", n)
			}
			if st := x.Status(); st[0].Up || !strings.Contains(st[0].Detail, "health probe") || !st[1].Up {
				t.Fatalf("status: %+v", st)
			}
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(changes) != "[0 false]" {
				t.Fatalf("health changes told: %v, want the hung exit out", changes)
			}
		})
	}
}

// TestExitsNoFaultOfTheExit: what an exit that works says of the
// receiving server is our failure (no verdict) but no mark against the
// exit, which stays in rotation: a server it could not reach (reply 5),
// again and again, and a CONNECT that timed out while the exit still
// answers its health probe (a silent server behind a working exit).
func TestExitsNoFaultOfTheExit(t *testing.T) {
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{})
	for name, reply := range map[string]func(netip.AddrPort) byte{
		"connection refused": refuse(5),
		"silent server": func(to netip.AddrPort) byte {
			if int(to.Port()) == peer.Port {
				return 0
			}
			return 5
		},
	} {
		t.Run(name, func(t *testing.T) {
			fx := testkit.StartFaultySOCKS5(t, "127.0.0.1", testkit.SOCKS5Fault{Reply: reply})
			exits, err := config.ParseSMTPExits(fx.URL())
			if err != nil {
				t.Fatal(err)
			}
			x, err := smtpprobe.NewExits(smtpprobe.ExitsConfig{Exits: exits, Policy: loopbackAllowed, Timeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			p := newProber(t, peer.Port, func(c *smtpprobe.Config) { c.Dialer = x })
			for range 3 {
				_, err := p.Open(context.Background(), "example", []string{"mx1.test"})
				var pe *smtpprobe.ProbeError
				if !errors.As(err, &pe) || !pe.Exit {
					t.Fatalf("Open: %v, want our exit's failure", err)
				}
			}
			if st := x.Status()[0]; !st.Up {
				t.Fatalf("status: %+v, want in rotation", st)
			}
		})
	}
}

// TestExitsCanary: with a canary the health probe is a real CONNECT to it
// through the exit, which must succeed: a real Dante reaching a loopback
// listener passes (the listener sees the exit's address), and the same
// Dante with a canary where nothing listens is out of rotation.
func TestExitsCanary(t *testing.T) {
	d := testkit.StartDante(t, exitA)
	exits, err := config.ParseSMTPExits(d.URL())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	from := make(chan string, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			from <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			c.Close()
		}
	}()
	open := netip.MustParseAddrPort(ln.Addr().String())
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := netip.MustParseAddrPort(gone.Addr().String())
	gone.Close()
	for _, c := range []struct {
		canary netip.AddrPort
		up     bool
	}{{open, true}, {closed, false}} {
		x, err := smtpprobe.NewExits(smtpprobe.ExitsConfig{Exits: exits, Canary: c.canary, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		x.Probe(context.Background())
		if st := x.Status()[0]; st.Up != c.up {
			t.Fatalf("canary %s: %+v, want up %v", c.canary, st, c.up)
		}
	}
	if got := testkit.Receive(t, from, 5*time.Second, "the canary's connection"); got != exitA {
		t.Fatalf("the canary saw a connection from %s, want the exit's %s", got, exitA)
	}
}

// TestExitsHungEndsTheSearch: a domain's other MX hosts are not tried
// through an exit that just failed (it saw to the other exits already):
// the hung exit sees the first host's dial and the probe that confirmed
// the hang, nothing more.
func TestExitsHungEndsTheSearch(t *testing.T) {
	hung := testkit.StartFaultySOCKS5(t, "127.0.0.1", testkit.SOCKS5Fault{Silent: true})
	exits, err := config.ParseSMTPExits(hung.URL())
	if err != nil {
		t.Fatal(err)
	}
	x, err := smtpprobe.NewExits(smtpprobe.ExitsConfig{Exits: exits, Policy: loopbackAllowed, Timeout: 200 * time.Millisecond, Retry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := newProber(t, 25, func(c *smtpprobe.Config) {
		c.Dialer, c.Resolver = x, hosts{"mx1.test": ip("127.0.0.1"), "mx2.test": ip("127.0.0.2")}
	})
	_, err = p.Open(context.Background(), "example", []string{"mx1.test", "mx2.test"})
	var pe *smtpprobe.ProbeError
	if !errors.As(err, &pe) || !pe.Exit || pe.Host != "mx1.test" {
		t.Fatalf("Open: %v, want our exit's failure at mx1.test", err)
	}
	if n := hung.Connections(); n != 2 {
		t.Fatalf("the hung exit saw %d connections, want 2", n)
	}
}
