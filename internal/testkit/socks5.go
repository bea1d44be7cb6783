package testkit

// The SOCKS5 exit of the tests: a real Dante server (danted, Debian package
// dante-server) on loopback, configured so that the connections it makes
// leave from a loopback address of their own. A loopback SMTP peer then
// tells a proxied connection (remote address SOCKS5External) from a direct
// one (127.0.0.1), which is how a test fails when the proxy is bypassed.
//
// The proxy is the one named by EVS_TEST_SOCKS5 when that is set (the
// Makefile's infra/scripts/with-socks5.sh exports it); otherwise, outside
// CI, the first test that asks starts danted itself and every test of the
// binary shares it.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Environment variables naming a running proxy: its URL and the address
// its outgoing connections come from.
const (
	SOCKS5EnvURL      = "EVS_TEST_SOCKS5"
	SOCKS5EnvExternal = "EVS_TEST_SOCKS5_EXTERNAL"
)

// SOCKS5External is the default address the test proxy connects from. It
// is a loopback address no test dials from directly (direct loopback
// connections come from 127.0.0.1).
const SOCKS5External = "127.0.0.3"

// SOCKS5Proxy is a running SOCKS5 server.
type SOCKS5Proxy struct {
	// URL is "socks5://127.0.0.1:PORT", the form EVS_SMTP_PROXY takes.
	URL string
	// External is the IP address the proxy's outgoing connections come
	// from, as a peer's remote address shows it.
	External string
}

var (
	socksOnce  sync.Once
	socksProxy SOCKS5Proxy
	socksErr   error
)

// SOCKS5 returns the SOCKS5 proxy the tests share. It fails the test, never
// skips it, when there is none: in CI (CI=true) EVS_TEST_SOCKS5 must be
// set; elsewhere danted is started when installed.
func SOCKS5(t testing.TB) SOCKS5Proxy {
	t.Helper()
	socksOnce.Do(func() {
		if u := os.Getenv(SOCKS5EnvURL); u != "" {
			socksProxy = SOCKS5Proxy{URL: u, External: os.Getenv(SOCKS5EnvExternal)}
			if socksProxy.External == "" {
				socksProxy.External = SOCKS5External
			}
			return
		}
		if os.Getenv("CI") == "true" {
			socksErr = fmt.Errorf("%s is not set: in CI the tests run through infra/scripts/with-socks5.sh (make test)", SOCKS5EnvURL)
			return
		}
		socksProxy, socksErr = startDante()
	})
	if socksErr != nil {
		t.Fatalf("socks5: %v", socksErr)
	}
	return socksProxy
}

// DantedPath finds the danted binary: on PATH, or in /usr/sbin, which is
// not on a normal user's PATH.
func DantedPath() (string, error) {
	if p, err := exec.LookPath("danted"); err == nil {
		return p, nil
	}
	if fi, err := os.Stat("/usr/sbin/danted"); err == nil && !fi.IsDir() {
		return "/usr/sbin/danted", nil
	}
	return "", fmt.Errorf("danted not found: install it with: apt-get install dante-server (make test does), or set %s", SOCKS5EnvURL)
}

// DantedConfig is the test proxy's configuration: listen on 127.0.0.1:port,
// connect out from external, no authentication, CONNECT to loopback only.
// Log lines go to stderr. Without user.* settings danted runs as whoever
// starts it (as root it warns that the unprivileged user is uid 0).
// infra/scripts/with-socks5.sh writes the same configuration.
func DantedConfig(port int, external string) string {
	return fmt.Sprintf(`logoutput: stderr
internal: 127.0.0.1 port = %d
external: %s
clientmethod: none
socksmethod: none
client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }
socks pass { from: 127.0.0.0/8 to: 127.0.0.0/8 command: connect }
socks block { from: 0.0.0.0/0 to: 0.0.0.0/0 }
`, port, external)
}

// startDante runs danted on a free loopback port and waits until it accepts
// connections.
func startDante() (SOCKS5Proxy, error) {
	path, err := DantedPath()
	if err != nil {
		return SOCKS5Proxy{}, err
	}
	p, err := freePort()
	if err != nil {
		return SOCKS5Proxy{}, err
	}
	port, _ := strconv.Atoi(p)
	dir, err := os.MkdirTemp("", "evs-danted-")
	if err != nil {
		return SOCKS5Proxy{}, err
	}
	conf := filepath.Join(dir, "danted.conf")
	if err := os.WriteFile(conf, []byte(DantedConfig(port, SOCKS5External)), 0o644); err != nil {
		return SOCKS5Proxy{}, err
	}
	// -N 1: one server process is plenty; -p: the default pid file is in
	// /run, which only root may write.
	cmd := exec.Command(path, "-f", conf, "-p", filepath.Join(dir, "danted.pid"), "-N", "1")
	cmd.SysProcAttr = sysProcAttr()
	var out tail
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return SOCKS5Proxy{}, fmt.Errorf("start danted: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	addr := net.JoinHostPort("127.0.0.1", p)
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			return SOCKS5Proxy{}, fmt.Errorf("danted exited at start (%v): %s", err, out.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return SOCKS5Proxy{URL: "socks5://" + addr, External: SOCKS5External}, nil
		}
		if time.Now().After(deadline) {
			kill(cmd)
			return SOCKS5Proxy{}, fmt.Errorf("danted did not listen on %s: %s", addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Addr returns the proxy's host:port.
func (p SOCKS5Proxy) Addr() string {
	u, err := url.Parse(p.URL)
	if err != nil {
		return ""
	}
	return u.Host
}

// CheckConnect makes one CONNECT through the proxy to a loopback listener
// and returns the address the connection came from. Tests call it first
// so a broken proxy shows as such, not as wrong verdicts.
func (p SOCKS5Proxy) CheckConnect(ctx context.Context) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	d := net.Dialer{}
	c, err := d.DialContext(ctx, "tcp", p.Addr())
	if err != nil {
		return "", fmt.Errorf("dial the proxy at %s: %w", p.Addr(), err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	// RFC 1928: greeting offering "no authentication", then CONNECT to
	// 127.0.0.1:port by IPv4 address.
	req := []byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, byte(port >> 8), byte(port)}
	if _, err := c.Write(req); err != nil {
		return "", err
	}
	reply := make([]byte, 2+10)
	if _, err := io.ReadFull(c, reply); err != nil {
		return "", fmt.Errorf("proxy reply: %w", err)
	}
	if reply[0] != 5 || reply[1] != 0 || reply[2] != 5 || reply[3] != 0 {
		return "", fmt.Errorf("proxy refused: % x", reply)
	}
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() { a, err := ln.Accept(); ch <- accepted{a, err} }()
	select {
	case a := <-ch:
		if a.err != nil {
			return "", a.err
		}
		defer a.c.Close()
		host, _, _ := net.SplitHostPort(a.c.RemoteAddr().String())
		return host, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}
