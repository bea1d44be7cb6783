package testkit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// MTARoot is the private root into which make mta (infra/scripts/
// fetch-mta.sh) unpacks the Debian packages of Exim and OpenSMTPD: they
// cannot be installed beside Postfix, as all three conflict on
// mail-transport-agent. EVS_MTA_ROOT names it; the default, the Makefile's
// too, is evs/mta/root under the user cache directory
// ($XDG_CACHE_HOME or ~/.cache).
func MTARoot() (string, error) {
	if r := os.Getenv("EVS_MTA_ROOT"); r != "" {
		return r, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no EVS_MTA_ROOT and no user cache directory: %w", err)
	}
	return filepath.Join(c, "evs", "mta", "root"), nil
}

// mtaBinary returns the path of an unpacked binary (rel, e.g.
// "usr/sbin/exim4") of MTARoot, or an error that says which make target
// provides it.
func mtaBinary(name, rel string) (string, error) {
	root, err := MTARoot()
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	p := filepath.Join(root, rel)
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", errors.New(name + " not unpacked at " + p + ": make test fetches it (make mta: infra/scripts/fetch-mta.sh)")
	}
	return p, nil
}

// mtaLibraryPath is the LD_LIBRARY_PATH that finds the libraries unpacked
// beside the binaries (libidn12 for exim4), e.g. ROOT/usr/lib/x86_64-linux-gnu.
func mtaLibraryPath() string {
	root, err := MTARoot()
	if err != nil {
		return ""
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "usr", "lib", "*-linux-gnu"))
	return strings.Join(dirs, ":")
}

// HarnessSource is the local address the Exim and OpenSMTPD harnesses
// connect from when they check that a listener answers, so that a filter
// or ACL aimed at the tests' own client address, 127.0.0.1, does not
// refuse the check.
const HarnessSource = "127.0.0.254"

// awaitSMTP waits until addr greets, then holds a short session (EHLO,
// QUIT) from HarnessSource to prove it is an SMTP server that works, and
// returns the greeting. exited closing means the server died first.
func awaitSMTP(exited <-chan struct{}, addr string, deadline time.Time) (string, error) {
	for {
		select {
		case <-exited:
			return "", errors.New("the daemon exited at start (its output says why)")
		default:
		}
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(HarnessSource)}}
		c, err := d.Dial("tcp", addr)
		if err == nil {
			banner, err := smtpCheck(c)
			c.Close()
			return banner, err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("nothing listened on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startOnPort runs start on port, or, when port is 0, on a free loopback
// port: one picked free can be taken by the time the daemon binds it, so a
// few are tried. It fails tb, naming the daemon, when none starts; how long
// it took is returned for the instance's Startup.
func startOnPort[T any](tb testing.TB, daemon string, port int, start func(port int) (T, error)) (T, time.Duration) {
	tb.Helper()
	begin := time.Now()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		p := port
		if p == 0 {
			free, err := freePort()
			if err != nil {
				tb.Fatal(err)
			}
			p, _ = strconv.Atoi(free)
		}
		d, err := start(p)
		if err == nil {
			return d, time.Since(begin)
		}
		lastErr = err
		if port != 0 || !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	tb.Fatalf("%s: %v", daemon, lastErr)
	var zero T
	return zero, 0
}

// mtaInstance is what each private MTA of the tests (Postfix, Exim,
// OpenSMTPD) is: a main listener, the greeting read from it, a directory of
// its own and a process in a group of its own.
type mtaInstance struct {
	// IP and Port are the main listener's; Addr is "IP:PORT".
	IP   string
	Port int
	Addr string
	// Banner is the greeting line the harness read from the main
	// listener, e.g. "220 mx.postfix.test ESMTP Postfix".
	Banner string
	// Dir holds the instance's configuration, state and logs.
	Dir string
	// Startup is how long starting the instance took, until every
	// listener had answered an SMTP session.
	Startup time.Duration

	cmd    *exec.Cmd
	exited chan struct{}
}

func newMTAInstance(ip string, port int, dir string) mtaInstance {
	return mtaInstance{IP: ip, Port: port, Addr: net.JoinHostPort(ip, strconv.Itoa(port)), Dir: dir, exited: make(chan struct{})}
}

// stop asks the daemon to stop (SIGTERM: each passes it on to its own
// processes and exits), kills its process group if it lingers, and
// removes the instance's directory.
func (m *mtaInstance) stop() {
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(3 * time.Second):
		}
		kill(m.cmd)
		<-m.exited
	}
	os.RemoveAll(m.Dir)
}

// launch starts cmd, whose output goes to out, as the instance's daemon
// (name says which in an error); a start that fails removes the
// instance's directory.
func (m *mtaInstance) launch(cmd *exec.Cmd, out io.Writer, name string) error {
	cmd.SysProcAttr = sysProcAttr()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(m.Dir)
		return fmt.Errorf("start %s: %w", name, err)
	}
	m.cmd = cmd
	go func() { cmd.Wait(); close(m.exited) }()
	return nil
}

// greeted waits, 15 s at most, until the main listener and each of extra
// ("IP:PORT") answer an SMTP session (await) with want as their greeting
// (or its start, with prefix), and keeps the main listener's in Banner. On
// the first that does not, it stops the instance and returns why, with
// what diag says of the daemon.
func (m *mtaInstance) greeted(extra []string, await func(addr string, deadline time.Time) (string, error), want string, prefix bool, diag func() string) error {
	deadline := time.Now().Add(15 * time.Second)
	for i, a := range append([]string{m.Addr}, extra...) {
		banner, err := await(a, deadline)
		switch {
		case err != nil:
		case prefix && !strings.HasPrefix(banner, want):
			err = fmt.Errorf("%s greeted %q, want %q...: is something else listening there?", a, banner, want)
		case !prefix && banner != want:
			err = fmt.Errorf("%s greeted %q, want %q: is something else listening there?", a, banner, want)
		}
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, diag())
			m.stop()
			return err
		}
		if i == 0 {
			m.Banner = banner
		}
	}
	return nil
}

// awaitFrom is awaitSMTP on the instance's daemon.
func (m *mtaInstance) awaitFrom(addr string, deadline time.Time) (string, error) {
	return awaitSMTP(m.exited, addr, deadline)
}
