package testkit

// A real Postfix (Debian package postfix, 3.7) as a loopback SMTP peer of
// the tests. Our reply classifier was graded on replies we wrote; a real
// Postfix wraps every access-map or policy refusal in words of its own
// ("<rcpt>: Recipient address rejected: TEXT", "Sender address rejected:",
// "Client host rejected:", "Relay access denied"), and only the real thing
// shows exactly what it sends.
//
// How it runs, found by trying as root with Postfix 3.7.11:
//
//   - Every instance has its own directory tree under os.TempDir: conf/
//     (main.cf, master.cf, the texthash maps), queue/ (queue_directory, with
//     the subdirectories and owners "postfix set-permissions" would make,
//     made here directly because post-install takes about two seconds),
//     data/ (data_directory, where master.lock lives) and the log file. The
//     system /etc/postfix is never read for configuration: master -c DIR
//     reads DIR/main.cf and DIR/master.cf and hands MAIL_CONFIG=DIR down to
//     every daemon. Only /etc/postfix/dynamicmaps.cf (meta_directory) is
//     read, and texthash and fail tables need no plug-in.
//   - The master daemon is started directly, /usr/lib/postfix/sbin/master
//     -c DIR -d, not through "postfix start": postfix-script runs its checks
//     (a second or more) and then detaches the master, which would then
//     outlive a test binary killed by a timeout. With -d the master stays in
//     the foreground, in the process group the harness gives it, so it is
//     our child: the kernel kills it when the test binary dies (Pdeathsig),
//     and its children (smtpd, cleanup, ...) exit when it does. Running
//     several instances at once needs no alternate_config_directories or
//     multi_instance settings: those guard the set-gid postdrop and postqueue
//     commands, which these tests never run.
//   - The master must start as root: it binds the listeners and its daemons
//     drop to mail_owner (postfix). The directories the daemons read are
//     0755 (os.MkdirTemp's 0700, and t.TempDir's parents, would keep the
//     postfix user out).
//   - Logging goes to a file through the postlog service (maillog_file,
//     Postfix 3.4 and later), printed with t.Log when the test fails.
//   - No mail is ever delivered: master.cf has the smtpd listeners and only
//     the services smtpd needs up to RCPT (cleanup, which smtpd opens at
//     MAIL FROM, trivial-rewrite, anvil, proxymap, bounce, postlog), and
//     no qmgr, pickup or delivery agents.

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/textproto"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PostfixOptions configure a private Postfix instance. Access maps are
// texthash tables: keys as Postfix access(5) takes them (an address, a
// domain, "user@", an IP address or a prefix of one), values any access
// action ("REJECT", "REJECT text", "550 5.2.1 text", "452 4.2.2 text",
// "DEFER_IF_PERMIT text", "OK", or a restriction class of Classes).
type PostfixOptions struct {
	// IP is the address of the main listener; default 127.0.0.1.
	IP string
	// Port is the port of every listener; 0 picks a free one.
	Port int
	// Hostname is myhostname; default "mx.postfix.test".
	Hostname string
	// Banner is smtpd_banner, the text after "220 "; default
	// "$myhostname ESMTP Postfix", Postfix's own default.
	Banner string
	// Domains are virtual_mailbox_domains; Mailboxes the addresses of
	// virtual_mailbox_maps. Any other address of these domains gets
	// Postfix's "User unknown in virtual mailbox table".
	Domains   []string
	Mailboxes []string
	// RecipientAccess is the check_recipient_access map, evaluated first
	// in smtpd_recipient_restrictions (after the relay check).
	RecipientAccess map[string]string
	// SenderAccess is the check_sender_access map of
	// smtpd_sender_restrictions, and ClientAccess the check_client_access
	// map of smtpd_client_restrictions. With smtpd_delay_reject (on) their
	// refusals show at RCPT.
	SenderAccess map[string]string
	ClientAccess map[string]string
	// Policy is the host:port of a policy service (a PolicyServer or
	// postgrey) asked about every recipient after RecipientAccess.
	Policy string
	// Classes are smtpd_restriction_classes: a name and its restriction
	// list, e.g. "greylist": "check_policy_service inet:127.0.0.1:PORT".
	// An access map value naming a class applies it.
	Classes map[string]string
	// Listeners are more smtpd listeners, on other loopback addresses and
	// the same port, each with settings of its own.
	Listeners []PostfixListener
	// Postscreen puts postscreen(8) in front of smtpd on the main
	// listener, as many sites run Postfix: a client it has not seen
	// before talks to postscreen's own SMTP engine, which runs the "deep
	// protocol tests" (bare newline, non-SMTP command, pipelining) and,
	// since it cannot hand a live session over to smtpd, answers every
	// RCPT with "450 4.3.2 Service currently unavailable" even when the
	// client passed; a client that passed and reconnects goes straight
	// to smtpd. The harness's own start-up check (EHLO, QUIT) reaches no
	// RCPT, so it does not pass the tests for 127.0.0.1. Listeners are
	// not screened. Params can override the postscreen_* settings.
	Postscreen bool
	// Params are more main.cf settings; they override the harness's.
	Params map[string]string
}

// PostfixListener is one more smtpd listener: master.cf "IP:PORT inet ...
// smtpd" with -o overrides.
type PostfixListener struct {
	// IP is its loopback address (on Linux all of 127.0.0.0/8 works).
	IP string
	// SenderAccess and ClientAccess replace the instance's maps on this
	// listener only (smtpd_sender_restrictions, smtpd_client_restrictions).
	SenderAccess map[string]string
	ClientAccess map[string]string
	// Params are more -o overrides, e.g. "virtual_mailbox_maps": "fail:x".
	Params map[string]string
}

// Postfix is a running private Postfix instance. Its Dir holds conf/,
// queue/, data/ and maillog.
type Postfix struct {
	mtaInstance
	out     *tail
	logPath string
}

// postfixDaemonDir is Debian's daemon_directory, where master lives.
const postfixDaemonDir = "/usr/lib/postfix/sbin"

// PostfixMaster returns the path of Postfix's master daemon, or an error
// saying how to install Postfix.
func PostfixMaster() (string, error) {
	p := filepath.Join(postfixDaemonDir, "master")
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		return "", errors.New("postfix not installed: make test installs it (make mta: apt-get install postfix)")
	}
	return p, nil
}

// StartPostfix starts a private Postfix on loopback, checks that it
// answers as Postfix on every listener, and stops it when the test ends.
// It fails the test, never skips it, when Postfix is missing or cannot
// start.
func StartPostfix(tb testing.TB, opts PostfixOptions) *Postfix {
	tb.Helper()
	master, err := PostfixMaster()
	if err != nil {
		tb.Fatal(err)
	}
	if os.Geteuid() != 0 {
		tb.Fatal("postfix: the master daemon must start as root (it binds the listeners and its daemons drop to the postfix user): run the tests as root, as CI does")
	}
	if opts.IP == "" {
		opts.IP = "127.0.0.1"
	}
	if opts.Hostname == "" {
		opts.Hostname = "mx.postfix.test"
	}
	if opts.Banner == "" {
		opts.Banner = "$myhostname ESMTP Postfix"
	}
	ids, err := postfixIDs()
	if err != nil {
		tb.Fatal(err)
	}
	pf, took := startOnPort(tb, "postfix", opts.Port, func(port int) (*Postfix, error) { return startPostfix(master, opts, port, ids) })
	pf.Startup = took
	tb.Cleanup(func() {
		if tb.Failed() {
			// postlogd writes a moment after the event.
			time.Sleep(300 * time.Millisecond)
			tb.Logf("postfix log (%s):\n%s", pf.logPath, lastLines(pf.Log(), 150))
		}
		pf.stop()
	})
	return pf
}

// postfixUsers are the accounts the Debian package makes: mail_owner
// (postfix) and setgid_group (postdrop).
type postfixUsers struct{ uid, gid, postdrop int }

func postfixIDs() (postfixUsers, error) {
	u, err := user.Lookup("postfix")
	if err != nil {
		return postfixUsers{}, fmt.Errorf("postfix: no postfix user (%v): is the postfix package installed? (make mta)", err)
	}
	g, err := user.LookupGroup("postdrop")
	if err != nil {
		return postfixUsers{}, fmt.Errorf("postfix: no postdrop group (%v): is the postfix package installed? (make mta)", err)
	}
	var ids postfixUsers
	ids.uid, _ = strconv.Atoi(u.Uid)
	ids.gid, _ = strconv.Atoi(u.Gid)
	ids.postdrop, _ = strconv.Atoi(g.Gid)
	return ids, nil
}

func startPostfix(master string, opts PostfixOptions, port int, ids postfixUsers) (*Postfix, error) {
	dir, err := os.MkdirTemp("", "evs-postfix-")
	if err != nil {
		return nil, err
	}
	pf := &Postfix{mtaInstance: newMTAInstance(opts.IP, port, dir), logPath: filepath.Join(dir, "maillog"), out: &tail{}}
	if err := pf.layout(opts, ids); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(master, "-c", filepath.Join(dir, "conf"), "-d")
	if err := pf.launch(cmd, pf.out, "master"); err != nil {
		return nil, err
	}
	var extra []string
	for _, l := range opts.Listeners {
		extra = append(extra, net.JoinHostPort(l.IP, strconv.Itoa(port)))
	}
	want := "220 " + strings.ReplaceAll(opts.Banner, "$myhostname", opts.Hostname)
	if err := pf.greeted(extra, pf.await, want, false, func() string {
		time.Sleep(300 * time.Millisecond) // postlogd writes a moment later
		return fmt.Sprintf("master output: %s\nlog:\n%s", pf.out.String(), lastLines(pf.Log(), 40))
	}); err != nil {
		return nil, err
	}
	return pf, nil
}

// layout writes the instance's directories and configuration.
func (pf *Postfix) layout(opts PostfixOptions, ids postfixUsers) error {
	conf := filepath.Join(pf.Dir, "conf")
	queue := filepath.Join(pf.Dir, "queue")
	data := filepath.Join(pf.Dir, "data")
	if err := os.Chmod(pf.Dir, 0o755); err != nil {
		return err
	}
	for _, d := range []string{conf, queue, filepath.Join(queue, "pid")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	// The queue subdirectories as postfix-files(5) makes them: owned by
	// postfix, public/ and maildrop/ reachable by group postdrop.
	for _, q := range []struct {
		name string
		mode os.FileMode
		gid  int
	}{
		{"active", 0o700, 0}, {"bounce", 0o700, 0}, {"corrupt", 0o700, 0}, {"defer", 0o700, 0},
		{"deferred", 0o700, 0}, {"flush", 0o700, 0}, {"hold", 0o700, 0}, {"incoming", 0o700, 0},
		{"private", 0o700, 0}, {"saved", 0o700, 0}, {"trace", 0o700, 0},
		{"maildrop", 0o730, ids.postdrop}, {"public", 0o710, ids.postdrop},
	} {
		p := filepath.Join(queue, q.name)
		if err := os.Mkdir(p, q.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, q.mode); err != nil { // umask
			return err
		}
		if err := os.Chown(p, ids.uid, q.gid); err != nil {
			return err
		}
	}
	if err := os.Mkdir(data, 0o700); err != nil {
		return err
	}
	if err := os.Chown(data, ids.uid, 0); err != nil {
		return err
	}

	writeMap := func(name string, m map[string]string) (string, error) {
		p := filepath.Join(conf, name)
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v := m[k]
			if strings.ContainsAny(k, " \t\r\n") || strings.ContainsAny(v, "\r\n") {
				return "", fmt.Errorf("map %s: key %q or value %q cannot be written to a texthash table", name, k, v)
			}
			fmt.Fprintf(&b, "%s %s\n", k, v)
		}
		return "texthash:" + p, os.WriteFile(p, []byte(b.String()), 0o644)
	}
	mailboxes := map[string]string{}
	for _, m := range opts.Mailboxes {
		mailboxes[m] = "mailbox" // the value (a mailbox path) is never used: nothing is delivered
	}
	vmaps, err := writeMap("virtual_mailboxes", mailboxes)
	if err != nil {
		return err
	}

	var rcptRestrictions []string
	if opts.RecipientAccess != nil {
		t, err := writeMap("recipient_access", opts.RecipientAccess)
		if err != nil {
			return err
		}
		rcptRestrictions = append(rcptRestrictions, "check_recipient_access "+t)
	}
	if opts.Policy != "" {
		rcptRestrictions = append(rcptRestrictions, "check_policy_service inet:"+opts.Policy)
	}
	senderRestrictions, err := accessRestriction(writeMap, "sender_access", "check_sender_access", opts.SenderAccess)
	if err != nil {
		return err
	}
	clientRestrictions, err := accessRestriction(writeMap, "client_access", "check_client_access", opts.ClientAccess)
	if err != nil {
		return err
	}

	main := map[string]string{
		"compatibility_level":   "3.6",
		"queue_directory":       queue,
		"data_directory":        data,
		"maillog_file":          pf.logPath,
		"maillog_file_prefixes": pf.Dir,
		"myhostname":            opts.Hostname,
		"mydomain":              "postfix.test",
		"smtpd_banner":          opts.Banner,
		// Nothing is local and no client is trusted: relaying is denied to
		// everyone, so "Relay access denied" is what a foreign domain gets.
		"mydestination":        "",
		"mynetworks":           "",
		"inet_interfaces":      "loopback-only",
		"inet_protocols":       "ipv4",
		"alias_maps":           "",
		"alias_database":       "",
		"local_recipient_maps": "",
		// No reverse DNS (this machine has no resolver to ask): the client
		// shows as unknown[127.0.0.1].
		"smtpd_peername_lookup": "no",
		// No mail to postmaster about our refusals: there is no one to
		// deliver it, and no qmgr.
		"notify_classes": "",
		// cleanup takes a flow-control token from qmgr for each new
		// message (at the first accepted RCPT) and, with no qmgr to hand
		// them out, waits in_flow_delay for one: a second per session.
		"in_flow_delay":                "0s",
		"virtual_mailbox_domains":      strings.Join(opts.Domains, " "),
		"virtual_mailbox_maps":         vmaps,
		"smtpd_relay_restrictions":     "reject_unauth_destination",
		"smtpd_recipient_restrictions": strings.Join(rcptRestrictions, ", "),
		"smtpd_sender_restrictions":    senderRestrictions,
		"smtpd_client_restrictions":    clientRestrictions,
		"smtpd_delay_reject":           "yes",
		// Many refused RCPTs in one session are the point of the tests.
		"smtpd_error_sleep_time":              "0",
		"smtpd_soft_error_limit":              "10000",
		"smtpd_hard_error_limit":              "10000",
		"smtpd_junk_command_limit":            "10000",
		"smtpd_recipient_limit":               "10000",
		"smtpd_client_connection_count_limit": "0",
		"smtpd_client_connection_rate_limit":  "0",
	}
	if opts.Postscreen {
		maps.Copy(main, postscreenParams)
	}
	if len(opts.Classes) > 0 {
		main["smtpd_restriction_classes"] = strings.Join(slices.Sorted(maps.Keys(opts.Classes)), " ")
		for name, r := range opts.Classes {
			main[name] = r
		}
	}
	maps.Copy(main, opts.Params)
	var mb strings.Builder
	mb.WriteString("# Written by evs internal/testkit (StartPostfix) for one test.\n")
	for _, k := range slices.Sorted(maps.Keys(main)) {
		if strings.ContainsAny(k+main[k], "\r\n") {
			return fmt.Errorf("main.cf %s: a value cannot span lines", k)
		}
		fmt.Fprintf(&mb, "%s = %s\n", k, main[k])
	}
	if err := os.WriteFile(filepath.Join(conf, "main.cf"), []byte(mb.String()), 0o644); err != nil {
		return err
	}

	var ms strings.Builder
	ms.WriteString("# service type private unpriv chroot wakeup maxproc command\n")
	if opts.Postscreen {
		// One postscreen process screens every connection and passes
		// the clients it lets through to the smtpd "pass" service.
		fmt.Fprintf(&ms, "%s inet n - n - 1 postscreen\n", net.JoinHostPort(opts.IP, strconv.Itoa(pf.Port)))
		ms.WriteString("smtpd pass - - n - - smtpd\n")
	} else {
		fmt.Fprintf(&ms, "%s inet n - n - - smtpd\n", net.JoinHostPort(opts.IP, strconv.Itoa(pf.Port)))
	}
	for i, l := range opts.Listeners {
		fmt.Fprintf(&ms, "%s inet n - n - - smtpd\n", net.JoinHostPort(l.IP, strconv.Itoa(pf.Port)))
		o := maps.Clone(l.Params)
		if o == nil {
			o = map[string]string{}
		}
		if l.SenderAccess != nil {
			if o["smtpd_sender_restrictions"], err = accessRestriction(writeMap, fmt.Sprintf("listener%d_sender_access", i+1), "check_sender_access", l.SenderAccess); err != nil {
				return err
			}
		}
		if l.ClientAccess != nil {
			if o["smtpd_client_restrictions"], err = accessRestriction(writeMap, fmt.Sprintf("listener%d_client_access", i+1), "check_client_access", l.ClientAccess); err != nil {
				return err
			}
		}
		o["syslog_name"] = fmt.Sprintf("postfix/listener%d", i+1)
		for _, k := range slices.Sorted(maps.Keys(o)) {
			// "-o { name = value }" (Postfix 3.0 and later) lets a value
			// hold spaces.
			fmt.Fprintf(&ms, "  -o { %s = %s }\n", k, o[k])
		}
	}
	ms.WriteString(`cleanup   unix n - n - 0 cleanup
rewrite   unix - - n - - trivial-rewrite
anvil     unix - - n - 1 anvil
proxymap  unix - - n - - proxymap
bounce    unix - - n - 0 bounce
defer     unix - - n - 0 bounce
trace     unix - - n - 0 bounce
postlog   unix-dgram n - n - 1 postlogd
`)
	if err := os.WriteFile(filepath.Join(conf, "master.cf"), []byte(ms.String()), 0o644); err != nil {
		return err
	}
	// Postfix will not read a configuration file or table changed within
	// the last second or so ("may be in the middle of an update"): it
	// waits, 300ms at a time, which made every start take two seconds.
	// Back-date everything written.
	entries, err := os.ReadDir(conf)
	if err != nil {
		return err
	}
	past := time.Now().Add(-time.Minute)
	for _, e := range entries {
		if err := os.Chtimes(filepath.Join(conf, e.Name()), past, past); err != nil {
			return err
		}
	}
	return nil
}

// postscreenParams are the main.cf settings of PostfixOptions.Postscreen.
// Found by trying with Postfix 3.7.11:
//
//   - postscreen_access_list is emptied: its default,
//     permit_mynetworks, would let a client of mynetworks skip every test
//     (the harness's mynetworks is empty anyway; an empty list says so
//     whatever Params set).
//   - The deep protocol tests are on, each failure enforced (the client
//     may go on and is refused at RCPT). A client that passes them all,
//     as every well-behaved client does, still gets the 450 4.3.2 at
//     RCPT on its first session: that is the behaviour under test.
//   - The cache (postscreen_cache_map, default
//     btree:$data_directory/postscreen_cache) lives in the instance's own
//     data directory, so no two instances share what they learned.
//   - postscreen_greet_wait, how long postscreen waits after its "220-"
//     teaser for a client that talks too early, is cut from 6 s to 1 s so
//     that a first session costs the tests little.
//   - No DNSBL sites (no dnsblog service is needed) and no TLS (no
//     tlsproxy): the machine has no internet to ask, and STARTTLS is not
//     what is screened.
var postscreenParams = map[string]string{
	"postscreen_access_list":             "",
	"postscreen_blacklist_action":        "ignore",
	"postscreen_greet_action":            "enforce",
	"postscreen_greet_wait":              "1s",
	"postscreen_dnsbl_sites":             "",
	"postscreen_bare_newline_enable":     "yes",
	"postscreen_bare_newline_action":     "enforce",
	"postscreen_non_smtp_command_enable": "yes",
	"postscreen_non_smtp_command_action": "enforce",
	"postscreen_pipelining_enable":       "yes",
	"postscreen_pipelining_action":       "enforce",
	"postscreen_tls_security_level":      "",
	"postscreen_cache_map":               "btree:$data_directory/postscreen_cache",
}

// accessRestriction writes an access map and returns the restriction that
// consults it, or "" for no map.
func accessRestriction(writeMap func(string, map[string]string) (string, error), file, check string, m map[string]string) (string, error) {
	if m == nil {
		return "", nil
	}
	t, err := writeMap(file, m)
	if err != nil {
		return "", err
	}
	return check + " " + t, nil
}

// await waits until addr greets, then holds a short session (EHLO, QUIT)
// to prove it is an SMTP server that works, and returns the greeting.
func (pf *Postfix) await(addr string, deadline time.Time) (string, error) {
	for {
		select {
		case <-pf.exited:
			return "", fmt.Errorf("the master daemon exited at start (a listener's address in use, or a bad setting)")
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
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

// smtpCheck reads the greeting and holds EHLO and QUIT.
func smtpCheck(c net.Conn) (string, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	tp := textproto.NewConn(c)
	line, err := tp.ReadLine()
	if err != nil {
		return "", fmt.Errorf("no greeting from %s: %w", c.RemoteAddr(), err)
	}
	for strings.HasPrefix(line, "220-") {
		if line, err = tp.ReadLine(); err != nil {
			return "", err
		}
	}
	if err := tp.PrintfLine("EHLO harness.evs.test"); err != nil {
		return line, err
	}
	if _, _, err := tp.ReadResponse(250); err != nil {
		return line, fmt.Errorf("EHLO at %s: %w", c.RemoteAddr(), err)
	}
	if err := tp.PrintfLine("QUIT"); err != nil {
		return line, err
	}
	if _, _, err := tp.ReadResponse(221); err != nil {
		return line, fmt.Errorf("QUIT at %s: %w", c.RemoteAddr(), err)
	}
	return line, nil
}

// Log returns the instance's log so far (postlogd writes it a moment after
// the event).
func (pf *Postfix) Log() string {
	b, err := os.ReadFile(pf.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return string(b)
}

// lastLines returns the last n lines of s, saying how many it left out.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return fmt.Sprintf("(%d earlier lines left out)\n%s", len(lines)-n, strings.Join(lines[len(lines)-n:], "\n"))
}

// PolicyServer is a Postfix policy-delegation service (SMTPD_POLICY_README)
// on loopback: Postfix sends "name=value" lines and a blank line for each
// recipient, on a connection it keeps open, and the server answers
// "action=...", a blank line.
type PolicyServer struct {
	// Addr is "127.0.0.1:PORT", the form PostfixOptions.Policy and
	// check_policy_service inet: take.
	Addr string

	ln     net.Listener
	decide func(map[string]string) string
}

// StartPolicy starts a policy service whose decide returns the action for
// one request (its attributes: "recipient", "sender", "client_address",
// "protocol_state", ...); "" answers DUNNO (no opinion). It stops when the
// test ends.
func StartPolicy(tb testing.TB, decide func(req map[string]string) string) *PolicyServer {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("policy server: %v", err)
	}
	s := &PolicyServer{Addr: ln.Addr().String(), ln: ln, decide: decide}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	tb.Cleanup(func() { ln.Close() })
	return s
}

func (s *PolicyServer) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	req := map[string]string{}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		if line != "" {
			k, v, _ := strings.Cut(line, "=")
			req[k] = v
			continue
		}
		action := s.decide(req)
		if action == "" {
			action = "DUNNO"
		}
		if _, err := fmt.Fprintf(c, "action=%s\n\n", action); err != nil {
			return
		}
		req = map[string]string{}
	}
}
