package testkit

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Postgrey is a running postgrey (Debian package postgrey), the greylisting
// policy service most Postfix sites use, on loopback with a database of
// its own.
type Postgrey struct {
	// Addr is "127.0.0.1:PORT", for PostfixOptions.Policy or Restriction.
	Addr string
	// Startup is how long postgrey took to listen.
	Startup time.Duration

	cmd    *exec.Cmd
	out    *LogBuffer
	exited chan struct{}
	dir    string
}

// PostgreyOptions configure a postgrey.
type PostgreyOptions struct {
	// Delay is how long a new triplet (client, sender, recipient) stays
	// greylisted; default 60s, longer than any test, so every retry within
	// a test is greylisted again. postgrey counts whole seconds.
	Delay time.Duration
}

// Restriction is the Postfix restriction that asks this postgrey, for
// PostfixOptions.Classes.
func (g *Postgrey) Restriction() string { return "check_policy_service inet:" + g.Addr }

// postgreyPath is where the Debian package installs postgrey.
const postgreyPath = "/usr/sbin/postgrey"

// StartPostgrey starts postgrey in the foreground on a free loopback port,
// with its database, pid file and (empty) whitelists in a directory of its
// own, never /var/lib/postgrey or /etc/postgrey. It fails the test, never
// skips it, when postgrey is missing or cannot start, and stops it when the
// test ends, printing its log if the test failed.
func StartPostgrey(tb testing.TB, opts PostgreyOptions) *Postgrey {
	tb.Helper()
	if fi, err := os.Stat(postgreyPath); err != nil || fi.IsDir() {
		tb.Fatal("postgrey not installed: make test installs it (make mta: apt-get install postgrey)")
	}
	if os.Geteuid() != 0 {
		tb.Fatal("postgrey: must start as root (it drops to the postgrey user): run the tests as root, as CI does")
	}
	if opts.Delay == 0 {
		opts.Delay = time.Minute
	}
	begin := time.Now()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		g, err := startPostgrey(opts)
		if err == nil {
			g.Startup = time.Since(begin)
			tb.Cleanup(func() {
				if tb.Failed() {
					tb.Logf("postgrey log:\n%s", lastLines(g.out.String(), 100))
				}
				g.stop()
			})
			return g
		}
		lastErr = err
	}
	tb.Fatalf("postgrey: %v", lastErr)
	return nil
}

func startPostgrey(opts PostgreyOptions) (*Postgrey, error) {
	u, err := user.Lookup("postgrey")
	if err != nil {
		return nil, fmt.Errorf("no postgrey user (%v): is the postgrey package installed? (make mta)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "evs-postgrey-")
	if err != nil {
		return nil, err
	}
	// postgrey drops to its user before it opens the database and writes
	// the pid file: both live in db/, which that user owns.
	db := filepath.Join(dir, "db")
	err = errors.Join(os.Chmod(dir, 0o755), os.Mkdir(db, 0o700), os.Chown(db, uid, gid),
		os.WriteFile(filepath.Join(dir, "whitelist_clients"), nil, 0o644),
		os.WriteFile(filepath.Join(dir, "whitelist_recipients"), nil, 0o644))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	g := &Postgrey{Addr: net.JoinHostPort("127.0.0.1", port), out: &LogBuffer{}, exited: make(chan struct{}), dir: dir}
	// Without --daemonize postgrey stays in the foreground and logs to
	// stderr. The whitelists are named so that the system's
	// /etc/postgrey/whitelist_* (which list big providers) play no part.
	g.cmd = exec.Command(postgreyPath, "--inet="+g.Addr, "--dbdir="+db, "--pidfile="+filepath.Join(db, "postgrey.pid"),
		"--delay="+strconv.Itoa(int(opts.Delay/time.Second)), "--hostname=postgrey.test",
		"--whitelist-clients="+filepath.Join(dir, "whitelist_clients"),
		"--whitelist-recipients="+filepath.Join(dir, "whitelist_recipients"))
	g.cmd.SysProcAttr = sysProcAttr()
	g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
	if err := g.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start postgrey: %w", err)
	}
	go func() { g.cmd.Wait(); close(g.exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-g.exited:
			g.stop()
			return nil, fmt.Errorf("postgrey exited at start: %s", g.out.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", g.Addr, time.Second); err == nil {
			c.Close()
			return g, nil
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, fmt.Errorf("postgrey did not listen on %s: %s", g.Addr, g.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (g *Postgrey) stop() {
	kill(g.cmd)
	<-g.exited
	os.RemoveAll(g.dir)
}
