package testkit

// A real Exim 4 (Debian package exim4-daemon-light, 4.96) as a loopback SMTP
// peer of the tests: after Postfix, the MTA our verdicts most often meet,
// with replies of its own ("550 Unrouteable address", multi-line callout
// reports "550-Callout verification failed:" that quote the backend).
//
// How it runs, found by trying as root with Exim 4.96:
//
//   - The binary comes from MTARoot, unpacked, not installed (installing it
//     would remove Postfix); LD_LIBRARY_PATH finds the libidn12 unpacked
//     beside it. It is started as "exim4 -C CONF -bdf -oX PORT": a daemon
//     in the foreground, our child (Pdeathsig), with the configuration
//     file of the instance. Root may name any -C file; Exim wants it owned by root
//     and writable by no one else.
//   - The binary looks up its compiled-in user, Debian-exim, before it
//     reads any configuration: make mta makes that system user, as the
//     exim4-base package would. The daemon stays root (it binds the
//     listeners); the processes that hold sessions run as Debian-exim and
//     write the spool (hints databases such as the callout cache) and the
//     logs, so those directories are that user's.
//   - Everything lives in the instance's directory: spool_directory,
//     log_file_path (mainlog, rejectlog, paniclog: printed when the test
//     fails). daemon_startup_retries = 0 makes a listener
//     address in use fail at once, not after nine 30-second retries.
//   - No TLS (tls_advertise_hosts empty; Debian's build would offer STARTTLS
//     with a self-signed certificate), no reverse DNS or ident lookups of
//     the client: nothing here should wait on the network. The daemon still
//     loads TLS credentials at start, and without tls_certificate it makes
//     an RSA key for a self-signed one, which delayed the first session by
//     half a second: it is given the harness's ECDSA certificate instead.
//   - The port is given with -oX, so the daemon writes no pid file: with
//     one it re-executes itself as it stops, to remove it (-oPX), by then
//     as Debian-exim, which cannot reach the binary under root's cache
//     directory, and each stop left a line in the paniclog.
//   - Nothing is ever delivered: local mailboxes are redirect routers to
//     :blackhole:, enough for "verify = recipient", and the tests never
//     send DATA.

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
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

// EximOptions configure a private Exim instance.
type EximOptions struct {
	// IP is the address of the main listener; default 127.0.0.1.
	// Listeners are more loopback addresses, on the same port, for
	// settings that must apply to one domain only: an ACL statement in
	// RcptACL can test $received_ip_address.
	IP        string
	Listeners []string
	// Port is the port of every listener; 0 picks a free one.
	Port int
	// Hostname is primary_hostname; default "mx.exim.test". The banner is
	// Exim's default, "HOSTNAME ESMTP Exim 4.96 DATE".
	Hostname string
	// Mailboxes are the addresses ("user@domain") that exist; their
	// domains are local_domains, where any other local part gets Exim's
	// "550 Unrouteable address". Domains are more local domains and
	// CatchAll local domains that accept any local part.
	Mailboxes []string
	Domains   []string
	CatchAll  []string
	// CalloutDomains are relay_to_domains routed to CalloutBackend
	// ("IP:PORT"), whose recipients Exim checks with a callout before it
	// answers (verify = recipient/callout), as gateways in front of
	// another mail server do.
	CalloutDomains []string
	CalloutBackend string
	// RcptACL are ACL statements that acl_check_rcpt runs first, before
	// the relay check, the recipient verify and the callout, e.g.
	//
	//	deny condition = ${if eq{$received_ip_address}{127.0.0.62}}
	//	     message = $sender_host_address is listed at zen.spamhaus.org
	RcptACL string
	// HeloACL, if set, is acl_smtp_helo, the ACL of EHLO and HELO (which
	// accepts what it does not deny), e.g. a deny of certain names.
	HeloACL string
}

// Exim is a running private Exim instance. Its Dir holds exim.conf,
// spool/ and log/; its Banner is like "220 mx.exim.test ESMTP Exim 4.96
// Fri, 27 Nov 2026 02:21:39 +0000".
type Exim struct {
	mtaInstance
	out *tail
}

// EximBinary returns the path of the unpacked exim4, or an error saying
// which make target fetches it.
func EximBinary() (string, error) { return mtaBinary("exim4", "usr/sbin/exim4") }

// StartExim starts a private Exim on loopback, checks that every listener
// answers as Exim, and stops it when the test ends, printing its logs if
// the test failed. It fails the test, never skips it, when Exim is missing
// or cannot start.
func StartExim(tb testing.TB, opts EximOptions) *Exim {
	tb.Helper()
	bin, err := EximBinary()
	if err != nil {
		tb.Fatal(err)
	}
	if os.Geteuid() != 0 {
		tb.Fatal("exim: the daemon must start as root (it binds the listeners and runs sessions as Debian-exim): run the tests as root, as CI does")
	}
	u, err := user.Lookup("Debian-exim")
	if err != nil {
		tb.Fatalf("exim: no Debian-exim user (%v), which exim4 is built to run as: make mta makes it", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if opts.IP == "" {
		opts.IP = "127.0.0.1"
	}
	if opts.Hostname == "" {
		opts.Hostname = "mx.exim.test"
	}
	ex, took := startOnPort(tb, "exim", opts.Port, func(port int) (*Exim, error) { return startExim(bin, opts, port, uid, gid) })
	ex.Startup = took
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("exim log (%s):\n%s", ex.Dir, lastLines(ex.Log(), 150))
		}
		ex.stop()
	})
	return ex
}

func startExim(bin string, opts EximOptions, port, uid, gid int) (*Exim, error) {
	dir, err := os.MkdirTemp("", "evs-exim-")
	if err != nil {
		return nil, err
	}
	ex := &Exim{mtaInstance: newMTAInstance(opts.IP, port, dir), out: &tail{}}
	spool, logs := filepath.Join(dir, "spool"), filepath.Join(dir, "log")
	err = errors.Join(os.Chmod(dir, 0o755), os.Mkdir(spool, 0o750), os.Chown(spool, uid, gid),
		os.Mkdir(logs, 0o750), os.Chown(logs, uid, gid))
	if err == nil {
		err = writeCertificate(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	}
	if err == nil {
		err = ex.writeConfig(opts)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, "-C", filepath.Join(dir, "exim.conf"), "-bdf", "-oX", strconv.Itoa(port))
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+mtaLibraryPath())
	if err := ex.launch(cmd, ex.out, "exim4"); err != nil {
		return nil, err
	}
	var extra []string
	for _, ip := range opts.Listeners {
		extra = append(extra, net.JoinHostPort(ip, strconv.Itoa(port)))
	}
	if err := ex.greeted(extra, ex.awaitFrom, "220 "+opts.Hostname+" ESMTP Exim ", true, func() string {
		return fmt.Sprintf("exim output: %s\nlog:\n%s", ex.out.String(), lastLines(ex.Log(), 40))
	}); err != nil {
		return nil, err
	}
	return ex, nil
}

// writeConfig writes exim.conf: the main settings, acl_check_rcpt, a
// router per kind of domain and the smtp transport of the callouts.
func (ex *Exim) writeConfig(opts EximOptions) error {
	mailboxes := filepath.Join(ex.Dir, "mailboxes")
	if err := os.WriteFile(mailboxes, []byte(strings.Join(opts.Mailboxes, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	local := append([]string(nil), opts.Domains...)
	local = append(local, opts.CatchAll...)
	for _, m := range opts.Mailboxes {
		if _, d, ok := strings.Cut(m, "@"); ok && !slices.Contains(local, d) {
			local = append(local, d)
		}
	}
	ifaces := []string{opts.IP}
	ifaces = append(ifaces, opts.Listeners...)
	list := func(items []string) string {
		if len(items) == 0 {
			return ""
		}
		return strings.Join(items, " : ")
	}
	backendIP, backendPort := "127.0.0.1", "25"
	if opts.CalloutBackend != "" {
		var err error
		if backendIP, backendPort, err = net.SplitHostPort(opts.CalloutBackend); err != nil {
			return fmt.Errorf("CalloutBackend %q: %w", opts.CalloutBackend, err)
		}
	} else if len(opts.CalloutDomains) > 0 {
		return errors.New("CalloutDomains without a CalloutBackend")
	}
	// The routers that have domains to serve: Exim would take an empty
	// domain list as matching nothing, but an absent router says so plainly.
	routers := ""
	if len(opts.CalloutDomains) > 0 {
		routers += fmt.Sprintf(`
callout_backend:
  driver = manualroute
  domains = +relay_to_domains
  transport = callout_smtp
  route_list = * %s
  self = send
`, backendIP)
	}
	if len(opts.CatchAll) > 0 {
		routers += fmt.Sprintf(`
catch_all:
  driver = redirect
  domains = %s
  data = :blackhole:
`, list(opts.CatchAll))
	}
	heloMain, heloACL := "", ""
	if opts.HeloACL != "" {
		heloMain = "acl_smtp_helo = acl_check_helo\n"
		heloACL = "\nacl_check_helo:\n" + opts.HeloACL + "\n  accept\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by evs internal/testkit (StartExim) for one test.
keep_environment =
primary_hostname = %s
spool_directory = %s
log_file_path = %s
local_interfaces = <; %s
daemon_startup_retries = 0
tls_advertise_hosts =
tls_certificate = %s
tls_privatekey = %s
host_lookup =
rfc1413_hosts =
domainlist local_domains = %s
domainlist relay_to_domains = %s
acl_smtp_rcpt = acl_check_rcpt
%s
begin acl
%s

acl_check_rcpt:
%s
  require message = relay not permitted
          domains = +local_domains : +relay_to_domains
  require verify = recipient
  deny    domains = +relay_to_domains
          !verify = recipient/callout=5s
  accept

begin routers
%s
mailboxes:
  driver = redirect
  domains = +local_domains
  condition = ${lookup{$local_part@$domain}lsearch{%s}{yes}{no}}
  data = :blackhole:

begin transports

callout_smtp:
  driver = smtp
  port = %s
`, opts.Hostname, filepath.Join(ex.Dir, "spool"), filepath.Join(ex.Dir, "log", "%slog"),
		strings.Join(ifaces, " ; "), filepath.Join(ex.Dir, "cert.pem"), filepath.Join(ex.Dir, "key.pem"),
		list(local), list(opts.CalloutDomains), heloMain, heloACL, opts.RcptACL,
		routers, mailboxes, backendPort)
	// Exim refuses a -C file that anyone but root (or its user) may write.
	return os.WriteFile(filepath.Join(ex.Dir, "exim.conf"), []byte(b.String()), 0o644)
}

// writeCertificate writes the harness's self-signed ECDSA certificate
// (smtpserver.go) and its key as PEM files.
func writeCertificate(certFile, keyFile string) error {
	cert, err := certificate()
	if err != nil {
		return err
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644),
		os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o644))
}

// Log returns the instance's mainlog and paniclog so far.
func (ex *Exim) Log() string {
	var b strings.Builder
	for _, name := range []string{"mainlog", "paniclog"} {
		data, err := os.ReadFile(filepath.Join(ex.Dir, "log", name))
		if err == nil {
			fmt.Fprintf(&b, "-- %s\n%s", name, data)
		}
	}
	if b.Len() == 0 {
		return "(no log yet)"
	}
	return b.String()
}
