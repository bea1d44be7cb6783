package batch_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// TestSessionLimitKeepsAnswers: a real session to a loopback server that
// answers two addresses at once and a third only after the group's time
// limit. The two answers received stand (contract, section 16); the
// address in flight and the one never asked are our limit's, not the
// mailboxes': retried at the next attempt, and only at the last do they
// end unknown/timeout.
func TestSessionLimitKeepsAnswers(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: func(addr string) string {
		switch {
		case strings.HasPrefix(addr, "yes@"):
			return "250 2.1.5 OK"
		case strings.HasPrefix(addr, "slow@"):
			select { // past the session's limit
			case <-release:
			case <-time.After(5 * time.Second):
			}
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 no such user"
	}})
	eng := loopbackEngine(t, peer.Port, verify.Config{}, "slow.example")
	p := &batch.Processor{Engine: eng, MaxGreyAttempts: 2, SessionLimit: 1500 * time.Millisecond}
	var items []evs.Item
	for i, e := range []string{"yes@slow.example", "no@slow.example", "slow@slow.example", "never@slow.example"} {
		items = append(items, evs.Item{Seq: i, Email: e, Domain: "slow.example"})
	}
	g := batch.Group{Domain: "slow.example", Items: items}

	for attempt, wantRetry := range []int{2, 0} {
		o, err := p.VerifyGroup(context.Background(), time.Time{}, false, evs.ModeFull, g, attempt)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]evs.Decision{}
		for _, r := range o.Results {
			got[r.Email] = r.Decision
		}
		if d := got["yes@slow.example"]; d.Checks.SMTP.Code != 250 {
			t.Errorf("attempt %d: the accepted answer was not kept: %s %+v", attempt, d.Reason, d.Checks.SMTP)
		}
		if d := got["no@slow.example"]; d.Reason != evs.ReasonRejectedEmail || d.Checks.SMTP.Code != 550 {
			t.Errorf("attempt %d: the rejection was not kept: %s %+v", attempt, d.Reason, d.Checks.SMTP)
		}
		if len(o.Retry) != wantRetry || len(o.Left) != 0 {
			t.Errorf("attempt %d: retry %v left %v, want %d to retry", attempt, o.Retry, o.Left, wantRetry)
		}
		for _, e := range []string{"slow@slow.example", "never@slow.example"} {
			d, decided := got[e]
			switch {
			case wantRetry > 0 && decided:
				t.Errorf("attempt %d: %s decided by our time limit: %s", attempt, e, d.Reason)
			case wantRetry == 0 && (d.Reason != evs.ReasonTimeout || d.Checks.SMTP.Detail != batch.DetailSession):
				t.Errorf("last attempt: %s %s %+v, want timeout with the session detail", e, d.Reason, d.Checks.SMTP)
			}
		}
	}
}

// slowPeer is a loopback MTA for domain slow.example that waits delay
// before every reply, accepts addresses that start with "yes" and rejects
// the rest, and the engine that probes it.
func slowPeer(t *testing.T, delay time.Duration) (*testkit.SMTPServer, *verify.Engine) {
	t.Helper()
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{Delay: delay, Rcpt: func(addr string) string {
		if strings.HasPrefix(addr, "yes") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 no such user"
	}})
	eng := loopbackEngine(t, peer.Port, verify.Config{}, "slow.example")
	return peer, eng
}

// TestSessionsSizedByTime: a group below the per-session cap, at a server
// that answers each command after 50 ms, with sessions of 1 s. Time, not
// the count, sizes each session: the group takes several sessions, each
// asks what its time holds and leaves the rest unasked for the next, and
// no address ends on our clock. The RCPT commands sent stay within the
// group's reservation (RcptBound), the accept-all probe of every session
// counted; what the reservation no longer covers is left, never asked,
// for a new admission.
func TestSessionsSizedByTime(t *testing.T) {
	cases := []struct {
		name   string
		prefix func(i int) string
	}{
		{"all rejected: no accept-all probe", func(int) string { return "no" }},
		{"every third accepted: a probe per session", func(i int) string {
			if i%3 == 0 {
				return "yes"
			}
			return "no"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			peer, eng := slowPeer(t, 50*time.Millisecond)
			p := &batch.Processor{Engine: eng, SessionLimit: time.Second}
			const n = 40
			var items []evs.Item
			for i := range n {
				items = append(items, evs.Item{Seq: i, Email: fmt.Sprintf("%s%d@slow.example", tc.prefix(i), i), Domain: "slow.example"})
			}
			o, err := p.VerifyGroup(context.Background(), time.Time{}, false, evs.ModeFull, batch.Group{Domain: "slow.example", Items: items}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if peer.Connections() < 2 {
				t.Fatalf("%d session(s) for %d addresses at 50 ms a reply in 1 s sessions: the count sized them, not the time", peer.Connections(), n)
			}
			rcpts := 0
			for _, c := range peer.Commands() {
				if strings.HasPrefix(strings.ToUpper(c), "RCPT") {
					rcpts++
				}
			}
			if bound := p.RcptBound(n); rcpts > bound {
				t.Fatalf("%d RCPT commands sent, %d reserved", rcpts, bound)
			}
			answered := 0
			for _, r := range o.Results {
				if r.Decision.Checks.SMTP.Code == 0 || r.Decision.Reason == evs.ReasonTimeout {
					t.Errorf("%s ended on our clock: %s %+v", r.Email, r.Decision.Reason, r.Decision.Checks.SMTP)
				}
				answered++
			}
			if len(o.Retry) != 0 || answered+len(o.Left) != n || answered < n/2 {
				t.Fatalf("%d answered, %d left, %d to retry of %d", answered, len(o.Left), len(o.Retry), n)
			}
			t.Logf("%d sessions, %d RCPT, %d answered, %d left for a new admission", peer.Connections(), rcpts, answered, len(o.Left))
		})
	}
}

// TestGroupSessionsAtOnce: a group of 250 addresses, three sessions' worth,
// with up to three sessions at once. The sessions beyond the first run
// only on the slots the caller hands out, each slot goes back, every
// address is asked once, and the RCPT commands stay within the group's
// one reservation.
func TestGroupSessionsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		slots    int // extra slots the caller has
		wantOpen int // sessions open at once at the server
	}{
		{"two more slots: three sessions at once", 2, 3},
		{"one more slot", 1, 2},
		{"no slot free: one after another", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer, eng := slowPeer(t, 5*time.Millisecond)
			p := &batch.Processor{Engine: eng, GroupSessions: 3}
			const n = 250
			var items []evs.Item
			for i := range n {
				items = append(items, evs.Item{Seq: i, Email: fmt.Sprintf("yes%d@slow.example", i), Domain: "slow.example"})
			}
			var mu sync.Mutex
			free, asked := tc.slots, 0
			extra := func(context.Context) (func(), bool) {
				mu.Lock()
				defer mu.Unlock()
				asked++
				if free == 0 {
					return nil, false
				}
				free--
				return func() { mu.Lock(); free++; mu.Unlock() }, true
			}
			o, err := p.VerifyGroupWith(context.Background(), time.Time{}, false, evs.ModeFull, batch.Group{Domain: "slow.example", Items: items}, 0, extra)
			if err != nil {
				t.Fatal(err)
			}
			if len(o.Results) != n || len(o.Left)+len(o.Retry) != 0 {
				t.Fatalf("%d results, %d left, %d to retry of %d", len(o.Results), len(o.Left), len(o.Retry), n)
			}
			seen := map[string]bool{}
			for _, r := range o.Results {
				if seen[r.Email] || r.Decision.Checks.SMTP.Code != 250 {
					t.Fatalf("%s: twice or unanswered: %+v", r.Email, r.Decision.Checks.SMTP)
				}
				seen[r.Email] = true
			}
			if got := peer.MaxConcurrent(); got != tc.wantOpen {
				t.Errorf("%d sessions open at once, want %d", got, tc.wantOpen)
			}
			rcpts := 0
			for _, c := range peer.Commands() {
				if strings.HasPrefix(strings.ToUpper(c), "RCPT") {
					rcpts++
				}
			}
			if bound := p.RcptBound(n); rcpts > bound {
				t.Errorf("%d RCPT commands sent, %d reserved", rcpts, bound)
			}
			mu.Lock()
			defer mu.Unlock()
			if free != tc.slots || asked > 2 {
				t.Errorf("%d of %d slots back, %d asked for (at most 2 beyond the first session)", free, tc.slots, asked)
			}
		})
	}
}

// TestCatchAllAskedAgain: the mailbox is accepted but the random address
// of the accept-all probe gets a temporary answer. The address is asked
// again, with the probe, at the next attempt (another session, later);
// only if the probe is still inconclusive then does the verdict fall back
// to accept-all. A test-mode batch and the last attempt never wait.
func TestCatchAllAskedAgain(t *testing.T) {
	var mu sync.Mutex
	probes := map[string]int{} // domain → random-address RCPTs so far
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: func(addr string) string {
		local, domain, _ := strings.Cut(addr, "@")
		if local != "zz-random" {
			return "250 2.1.5 OK"
		}
		mu.Lock()
		defer mu.Unlock()
		probes[domain]++
		switch {
		case domain == "later.example" && probes[domain] > 1:
			return "550 5.1.1 no such user"
		case domain == "later.example":
			return "452 4.5.3 Too many recipients"
		}
		return "450 4.7.1 Recipient address rejected: unverified address"
	}})
	eng := loopbackEngine(t, peer.Port, verify.Config{RandomLocal: func() string { return "zz-random" }}, "later.example", "never.example")
	p := &batch.Processor{Engine: eng, Sandbox: verify.NewSandbox(nil), MaxGreyAttempts: 3}
	group := func(domain string) batch.Group {
		return batch.Group{Domain: domain, Items: []evs.Item{{Seq: 0, Email: "yes@" + domain, Domain: domain}}}
	}
	run := func(domain string, attempt int) batch.Outcome {
		t.Helper()
		o, err := p.VerifyGroup(context.Background(), time.Time{}, false, evs.ModeFull, group(domain), attempt)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, domain := range []string{"later.example", "never.example"} {
		if o := run(domain, 0); len(o.Retry) != 1 || len(o.Results) != 0 {
			t.Fatalf("%s, attempt 0: %d retried, %d results; want the address asked again later", domain, len(o.Retry), len(o.Results))
		}
	}
	o := run("later.example", 1)
	if len(o.Results) != 1 {
		t.Fatalf("later.example, attempt 1: %d results, %d retried", len(o.Results), len(o.Retry))
	}
	if d := o.Results[0].Decision; d.Status() != evs.Deliverable || d.Checks.SMTP.CatchAll != evs.SMTPRejected {
		t.Errorf("later.example: %s/%s, catch-all %q; want deliverable once the second probe was rejected", d.Status(), d.Reason, d.Checks.SMTP.CatchAll)
	}
	o = run("never.example", 1)
	if len(o.Results) != 1 {
		t.Fatalf("never.example, attempt 1: %d results, %d retried", len(o.Results), len(o.Retry))
	}
	if d := o.Results[0].Decision; d.Status() != evs.Risky || !d.Flags.AcceptAllUnknown || d.Checks.SMTP.CatchAll != evs.SMTPGreylisted {
		t.Errorf("never.example: %s/%s, catch-all %q, flags %+v; want risky with the probe inconclusive", d.Status(), d.Reason, d.Checks.SMTP.CatchAll, d.Flags)
	}
	mu.Lock()
	defer mu.Unlock()
	if probes["later.example"] != 2 || probes["never.example"] != 2 {
		t.Errorf("random-address probes %v; want two per domain (one per session)", probes)
	}
}

// loopbackEngine is the engine, configured as cfg otherwise, whose DNS
// gives each of domains its mail host mx.<domain> on 127.0.0.1, and whose
// SMTP probes reach the peer on port there.
func loopbackEngine(t *testing.T, port int, cfg verify.Config, domains ...string) *verify.Engine {
	t.Helper()
	dns := testkit.StartDNS(t)
	for _, d := range domains {
		dns.AddRecord(d + ". 300 IN MX 10 mx." + d + ".")
		dns.AddRecord("mx." + d + ". 300 IN A 127.0.0.1")
	}
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{dns.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	loopback, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	probe, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: port, Resolver: res, Egress: loopback, ReplyTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Resolver, cfg.Prober = res, verify.SMTP(probe)
	eng, err := verify.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}
