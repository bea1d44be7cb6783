package smtpprobe_test

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	cfg := smtpprobe.ExitsConfig{Exits: exits, Policy: loopbackAllowed, Retry: 100 * time.Millisecond, ProbeTimeout: time.Second}
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
// high) takes none of its sessions while another exit is in rotation;
// when every exit is avoided, the hash decides as before.
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

// TestExitsProbe: the health probe is a SOCKS5 handshake with the exit's
// credentials. A real Dante that takes no authentication passes; a proxy
// refusing our credentials, or not speaking SOCKS5, is out of rotation,
// and the detail never quotes the password.
func TestExitsProbe(t *testing.T) {
	d := testkit.StartDante(t, exitA)
	for _, c := range []struct {
		name, addr, detail string
	}{
		{"Dante, offered credentials, picks none", fmt.Sprintf("127.0.0.1:%d", d.Port), ""},
		{"credentials refused", fakeSOCKS(t, []byte{5, 2}), "user name and password were refused"},
		{"no acceptable method", fakeSOCKS(t, []byte{5, 0xff}), "no acceptable authentication method"},
		{"not SOCKS5", fakeSOCKS(t, []byte("HTTP/1.1 400 Bad Request\r\n")), "not a SOCKS5 server"},
		{"nothing listening", "127.0.0.1:1", "dial the proxy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			exits, err := config.ParseSMTPExits("socks5://evs:s3cret@" + c.addr)
			if err != nil {
				t.Fatal(err)
			}
			x, err := smtpprobe.NewExits(smtpprobe.ExitsConfig{Exits: exits, Policy: loopbackAllowed, ProbeTimeout: time.Second})
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
