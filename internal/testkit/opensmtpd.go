package testkit

// A real OpenSMTPD (Debian package opensmtpd, 6.8) as a loopback SMTP peer
// of the tests. Its refusals are worded like no other MTA's: an unknown
// user of a virtual domain gets "524 5.2.4 Mailing list expansion
// problem", one that no rule matches "550 Invalid recipient" with no
// enhanced code, and only the real thing shows which a configuration
// sends.
//
// How it runs, found by trying as root with OpenSMTPD 6.8.0p2:
//
//   - The binary comes from MTARoot, unpacked, not installed (installing it
//     would remove Postfix). It looks up its compiled-in users, opensmtpd
//     and opensmtpq, at start: make mta makes them, as the package would.
//   - Its paths are compiled in and no option moves them: the queue
//     /var/spool/smtpd, the control socket /var/run/smtpd.sock (a second
//     smtpd refuses to start while one holds it) and the privilege-
//     separation chroot /var/lib/opensmtpd/empty. So each instance runs in
//     a mount namespace of its own, where the instance's var/ directory is
//     bind-mounted over /var: "unshare --mount --propagation private sh -c
//     'mount --bind VAR /var && exec smtpd -d -f CONF'". The system's /var
//     is never written, and instances (in this or another test binary) do
//     not meet. unshare and sh exec, so the smtpd is our child itself, in
//     the process group the harness gives it, with Pdeathsig.
//   - "-d" keeps it in the foreground and logs to stderr, which the harness
//     keeps and prints when the test fails.
//   - Tables are file tables in the instance's directory, outside /var.
//   - Nothing is delivered: the tests never send DATA. An action's
//     delivery user (e.g. "mail" in a virtual table) must exist, because
//     smtpd resolves it at RCPT.

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// OpenSMTPDOptions configure a private OpenSMTPD. Filters and Rules are
// smtpd.conf(5) lines, written as given; the harness writes the tables,
// the listeners and nothing else.
type OpenSMTPDOptions struct {
	// IP is the address of the main listener; default 127.0.0.1. Filter
	// names the filter (or filter chain) of Filters the main listener
	// applies, if any.
	IP     string
	Filter string
	// Port is the port of every listener; 0 picks a free one.
	Port int
	// Hostname is every listener's hostname, which the banner shows:
	// "220 HOSTNAME ESMTP OpenSMTPD"; default "mx.opensmtpd.test".
	Hostname string
	// Listeners are more listeners, on other loopback addresses and the
	// same port, each with a filter of its own.
	Listeners []OpenSMTPDListener
	// Tables are file tables, a name and its lines ("key" for a list,
	// "key value" for a mapping), declared as "table NAME file:PATH" so
	// that Rules and Filters can say <NAME>.
	Tables map[string][]string
	// Filters are "filter ..." lines, e.g. `filter "dnsbl" phase rcpt-to
	// match src <us> reject "550 5.7.1 listed"`.
	Filters []string
	// Rules are the "action ..." and "match ..." lines.
	Rules []string
}

// OpenSMTPDListener is one more listener: "listen on IP port PORT
// hostname HOSTNAME [filter NAME]".
type OpenSMTPDListener struct {
	IP     string
	Filter string
}

// OpenSMTPD is a running private OpenSMTPD. Its Dir holds smtpd.conf,
// the tables and var/ (the instance's /var); its Banner is like "220
// mx.opensmtpd.test ESMTP OpenSMTPD". Stopping it ends its mount namespace,
// and the bind mount in it, with its last process.
type OpenSMTPD struct {
	mtaInstance
	out *LogBuffer
}

// OpenSMTPDBinary returns the path of the unpacked smtpd, or an error
// saying which make target fetches it.
func OpenSMTPDBinary() (string, error) { return mtaBinary("smtpd", "usr/sbin/smtpd") }

// StartOpenSMTPD starts a private OpenSMTPD on loopback, checks that every
// listener answers as OpenSMTPD, and stops it when the test ends, printing
// its log if the test failed. It fails the test, never skips it, when
// OpenSMTPD is missing or cannot start.
func StartOpenSMTPD(tb testing.TB, opts OpenSMTPDOptions) *OpenSMTPD {
	tb.Helper()
	bin, err := OpenSMTPDBinary()
	if err != nil {
		tb.Fatal(err)
	}
	if os.Geteuid() != 0 {
		tb.Fatal("opensmtpd: smtpd must start as root (it binds the listeners, mounts its private /var and drops to opensmtpd): run the tests as root, as CI does")
	}
	for _, name := range []string{"opensmtpd", "opensmtpq"} {
		if _, err := user.Lookup(name); err != nil {
			tb.Fatalf("opensmtpd: no %s user (%v), which smtpd is built to run as: make mta makes it", name, err)
		}
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		tb.Fatalf("opensmtpd: unshare (util-linux) is needed to give smtpd a private /var: %v", err)
	}
	if opts.IP == "" {
		opts.IP = "127.0.0.1"
	}
	if opts.Hostname == "" {
		opts.Hostname = "mx.opensmtpd.test"
	}
	s, took := startOnPort(tb, "opensmtpd", opts.Port, func(port int) (*OpenSMTPD, error) { return startOpenSMTPD(unshare, bin, opts, port) })
	s.Startup = took
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("opensmtpd log (%s):\n%s", s.Dir, lastLines(s.Log(), 150))
		}
		s.stop()
	})
	return s
}

func startOpenSMTPD(unshare, bin string, opts OpenSMTPDOptions, port int) (*OpenSMTPD, error) {
	dir, err := os.MkdirTemp("", "evs-opensmtpd-")
	if err != nil {
		return nil, err
	}
	s := &OpenSMTPD{mtaInstance: newMTAInstance(opts.IP, port, dir), out: &LogBuffer{}}
	if err := s.layout(opts); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" /var && exec "$2" -d -f "$3"`, "sh",
		filepath.Join(dir, "var"), bin, filepath.Join(dir, "smtpd.conf"))
	if err := s.launch(cmd, s.out, "smtpd"); err != nil {
		return nil, err
	}
	var extra []string
	for _, l := range opts.Listeners {
		extra = append(extra, net.JoinHostPort(l.IP, strconv.Itoa(port)))
	}
	if err := s.greeted(extra, s.awaitFrom, "220 "+opts.Hostname+" ESMTP OpenSMTPD", false, func() string {
		return "smtpd output:\n" + lastLines(s.out.String(), 40)
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// layout writes the instance's /var, its tables and smtpd.conf.
func (s *OpenSMTPD) layout(opts OpenSMTPDOptions) error {
	v := filepath.Join(s.Dir, "var")
	// smtpd checks these owners and modes: the spool root's, 0711, and
	// the chroot's, a root-owned directory no one else may write. mail/ is
	// the home of the "mail" user, where smtpd looks for a .forward.
	dirs := []struct {
		path string
		mode os.FileMode
	}{
		{s.Dir, 0o755}, {v, 0o755}, {filepath.Join(v, "spool"), 0o755}, {filepath.Join(v, "spool", "smtpd"), 0o711},
		{filepath.Join(v, "run"), 0o755}, {filepath.Join(v, "lib"), 0o755}, {filepath.Join(v, "lib", "opensmtpd"), 0o755},
		{filepath.Join(v, "lib", "opensmtpd", "empty"), 0o755}, {filepath.Join(v, "mail"), 0o755},
		{filepath.Join(v, "tmp"), 0o1777},
	}
	for _, d := range dirs {
		if d.path != s.Dir {
			if err := os.Mkdir(d.path, d.mode); err != nil {
				return err
			}
		}
		if err := os.Chmod(d.path, d.mode); err != nil { // umask
			return err
		}
	}
	var b strings.Builder
	b.WriteString("# Written by evs internal/testkit (StartOpenSMTPD) for one test.\n")
	for _, name := range slices.Sorted(maps.Keys(opts.Tables)) {
		if strings.ContainsAny(name, " \t\r\n\"<>/") {
			return fmt.Errorf("table name %q", name)
		}
		p := filepath.Join(s.Dir, "table-"+name)
		if err := os.WriteFile(p, []byte(strings.Join(opts.Tables[name], "\n")+"\n"), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&b, "table %s file:%s\n", name, p)
	}
	for _, f := range opts.Filters {
		b.WriteString(f + "\n")
	}
	listen := func(ip, filter string) {
		fmt.Fprintf(&b, "listen on %s port %d hostname %s", ip, s.Port, opts.Hostname)
		if filter != "" {
			fmt.Fprintf(&b, " filter %q", filter)
		}
		b.WriteString("\n")
	}
	listen(opts.IP, opts.Filter)
	for _, l := range opts.Listeners {
		listen(l.IP, l.Filter)
	}
	for _, r := range opts.Rules {
		b.WriteString(r + "\n")
	}
	if strings.Contains(b.String(), "\r") {
		return errors.New("smtpd.conf: a line holds a carriage return")
	}
	return os.WriteFile(filepath.Join(s.Dir, "smtpd.conf"), []byte(b.String()), 0o644)
}

// Log returns what smtpd logged so far (one line per session event, e.g.
// `smtp failed-command command="RCPT TO:<x@y>" result="550 Invalid
// recipient: <x@y>"`).
func (s *OpenSMTPD) Log() string { return s.out.String() }
