package testkit

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Dante is a private Dante server (danted) of one test, which the test
// stops and starts again on the same port: several SOCKS exits, each
// connecting out from its own loopback address, so that a peer tells
// which exit a connection came through. The shared proxy of SOCKS5 must
// stay up for the other tests, so it is never the one stopped.
type Dante struct {
	// Port is the port it listens on, on 127.0.0.1.
	Port int
	// External is the address its connections come from.
	External string

	t   testing.TB
	dir string
	cmd *exec.Cmd
}

// StartDante starts a danted connecting out from external (a loopback
// address no other test uses) and stops it when the test ends.
func StartDante(t testing.TB, external string) *Dante {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	d := &Dante{Port: port, External: external, t: t, dir: t.TempDir()}
	t.Cleanup(d.Stop)
	d.Start()
	return d
}

// URL is "socks5://127.0.0.1:PORT", the form EVS_SMTP_PROXY takes.
func (d *Dante) URL() string { return fmt.Sprintf("socks5://127.0.0.1:%d", d.Port) }

// Start starts the server (again) and waits until it accepts connections.
func (d *Dante) Start() {
	d.t.Helper()
	path, err := DantedPath()
	if err != nil {
		d.t.Fatal(err)
	}
	conf := filepath.Join(d.dir, "danted.conf")
	if err := os.WriteFile(conf, []byte(DantedConfig(d.Port, d.External)), 0o600); err != nil {
		d.t.Fatal(err)
	}
	d.cmd = exec.Command(path, "-f", conf, "-p", filepath.Join(d.dir, "danted.pid"), "-N", "1")
	d.cmd.SysProcAttr = sysProcAttr()
	var out tail
	d.cmd.Stdout, d.cmd.Stderr = &out, &out
	if err := d.cmd.Start(); err != nil {
		d.t.Fatalf("start danted: %v", err)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(d.Port))); err == nil {
			c.Close()
			return
		}
		if time.Now().After(end) {
			d.Stop()
			d.t.Fatalf("danted did not listen on port %d: %s", d.Port, out.String())
		}
	}
}

// Stop stops the server; its port stays reserved for Start in this test.
func (d *Dante) Stop() {
	if d.cmd != nil {
		kill(d.cmd)
		_ = d.cmd.Wait()
		d.cmd = nil
	}
}
