package batch_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// dante is a private Dante server (danted) the test stops and starts again
// on the same port: the shared one of the other tests must stay up.
type dante struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func newDante(t *testing.T) *dante {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	d := &dante{t: t, port: port, dir: t.TempDir()}
	t.Cleanup(d.stop)
	return d
}

func (d *dante) url() string { return fmt.Sprintf("socks5://127.0.0.1:%d", d.port) }

func (d *dante) start() {
	d.t.Helper()
	path, err := testkit.DantedPath()
	if err != nil {
		d.t.Fatal(err)
	}
	conf := filepath.Join(d.dir, "danted.conf")
	if err := os.WriteFile(conf, []byte(testkit.DantedConfig(d.port, testkit.SOCKS5External)), 0o600); err != nil {
		d.t.Fatal(err)
	}
	d.cmd = exec.Command(path, "-f", conf, "-p", filepath.Join(d.dir, "danted.pid"), "-N", "1")
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	testkit.Eventually(d.t, 10*time.Second, func() error {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", d.port))
		if err != nil {
			return fmt.Errorf("danted is not listening: %w", err)
		}
		c.Close()
		return nil
	})
}

// countingVerifier counts the groups asked of its Verifier.
type countingVerifier struct {
	batch.Verifier
	calls atomic.Int64
}

func (c *countingVerifier) VerifyDomain(ctx context.Context, emails []string, mode evs.Mode) []evs.Decision {
	c.calls.Add(1)
	return c.Verifier.VerifyDomain(ctx, emails, mode)
}

func (d *dante) stop() {
	if d.cmd != nil {
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
		d.cmd = nil
	}
}

// TestExitDownIsNoVerdict: a live batch runs while our SMTP exit (a real
// Dante server) is down. No address is decided meanwhile (contract,
// section 16); once the exit is back, the batch completes with the
// verdicts the receiving server gives.
func TestExitDownIsNoVerdict(t *testing.T) {
	t.Parallel()
	exit := newDante(t)
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: func(addr string) string {
		if strings.HasPrefix(addr, "no@") {
			return "550 5.1.1 no such user"
		}
		if strings.HasPrefix(addr, "u") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 no such user" // the accept-all probe's random address
	}})
	dns := testkit.StartDNS(t)
	dns.AddRecord("exit.example. 300 IN MX 10 mx.exit.example.")
	dns.AddRecord("mx.exit.example. 300 IN A 127.0.0.1")
	vars := map[string]string{
		"EVS_SMTP": "proxy", "EVS_SMTP_PROXY": exit.url(), "EVS_DNS_SERVERS": dns.Addr,
		"EVS_SMTP_PORT": fmt.Sprint(peer.Port), "EVS_SMTP_HELO": "probe.evs.test", "EVS_EGRESS_ALLOW": "127.0.0.0/8",
	}
	cfg, err := config.FromEnv(func(k string) string { return vars[k] }, true)
	if err != nil {
		t.Fatal(err)
	}
	engine, _, err := verify.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}

	e := newEnv(t)
	asked := &countingVerifier{Verifier: engine}
	r := e.runner(e.st, asked, batch.Worker{Processor: &batch.Processor{ExitRetry: 100 * time.Millisecond}}, batch.LocalConfig{})
	b := e.batch(e.account(false), time.Now(), "u1@exit.example", "u2@exit.example", "no@exit.example")
	if err := r.Enqueue(e.ctx, b); err != nil {
		t.Fatal(err)
	}
	// Several retries with the exit down (the domain's group asked of the
	// engine four times, three of them after ExitRetry): nothing decided.
	testkit.Eventually(t, 20*time.Second, testkit.Until(func() bool { return asked.calls.Load() >= 4 }, "the engine was asked about the group fewer than 4 times"))
	if got, err := e.st.Batch(e.ctx, b.AccountID, b.ID); err != nil || got.State.Final() || got.Counters.Processed != 0 {
		t.Fatalf("with the exit down: %s %+v %v; want running with nothing processed", got.State, got.Counters, err)
	}
	exit.start()
	got := e.wait(b, 20*time.Second)
	if got.State != evs.StateCompleted || got.Counters.Deliverable != 2 || got.Counters.Undeliverable != 1 {
		t.Fatalf("%s %+v, want 2 deliverable and 1 undeliverable", got.State, got.Counters)
	}
	for _, res := range e.results(b) {
		if res.Decision.Checks.SMTP.Code == 0 {
			t.Errorf("%s: %s with no reply from the server: %+v", res.Email, res.Decision.Reason, res.Decision.Checks.SMTP)
		}
	}
	if len(peer.Clients()) == 0 {
		t.Fatal("the receiving server saw no connection")
	}
}
