package verify_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// TestVerifyGoesThroughTheGate: a synchronous verification (/v1/verify)
// asks the gate the deployment's batches go through before it opens its
// session. While a batch holds every session of the provider it waits, up
// to GateWait, and is answered unknown, deferred by our politeness, when
// none frees; a provider paused after a 421 defers it at once; a 421 it
// meets itself pauses the provider for the batches. VerifyDomain, the
// batch path, is admitted by its caller and does not ask again.
func TestVerifyGoesThroughTheGate(t *testing.T) {
	t.Parallel()
	const gateWait = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		// batch does what the batches do with the gate, and returns what
		// ends their sessions.
		batch  func(t *testing.T, g *politeness.Gate, key string, ended func()) (end func())
		email  string
		domain bool // through VerifyDomain
		reason evs.Reason
		detail string // in checks.smtp.detail
		// waits: the verification asked the gate again while it waited
		// (the State is asked every poll, 200 ms, within GateWait), and
		// opened its session only after the batch's had ended.
		waits  bool
		pauses bool // the provider is paused afterwards
	}{
		{name: "no batch", email: "alice@corp.example", reason: evs.ReasonAcceptedEmail},
		{name: "batch holds the session past the wait", batch: hold(0), email: "alice@corp.example",
			reason: evs.ReasonMailboxNotChecked, detail: "deferred by our politeness limits: every SMTP session we allow to corp.example at once is in use", waits: true},
		{name: "batch ends its session within the wait", batch: hold(100 * time.Millisecond), email: "alice@corp.example",
			reason: evs.ReasonAcceptedEmail, waits: true},
		{name: "provider paused by a batch", batch: func(t *testing.T, g *politeness.Gate, key string, _ func()) func() {
			a := admitOK(t, g, key)
			if _, err := a.Done(context.Background(), true); err != nil {
				t.Fatal(err)
			}
			return func() {}
		}, email: "alice@corp.example", reason: evs.ReasonMailboxNotChecked,
			detail: "deferred by our politeness limits: corp.example asked us to slow down and is paused for every check; retry in 60 s", pauses: true},
		{name: "a 421 pauses the batches", email: "slow@corp.example", reason: evs.ReasonGreylisted, pauses: true},
		{name: "the batch path is not asked twice", batch: hold(0), email: "alice@corp.example", domain: true, reason: evs.ReasonAcceptedEmail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Whether the batch's session had ended when each RCPT came.
			var ended atomic.Bool
			var early atomic.Int32
			table := rcptTable(map[string]string{
				"alice": "250 2.1.5 OK", "slow": "421 4.7.0 Too many connections, try again later",
			}, "550 5.1.1 no such user")
			w := startPeers(t, []mta{{ip: "127.0.0.2", opts: testkit.SMTPOptions{Rcpt: func(a string) string {
				if !ended.Load() {
					early.Add(1)
				}
				return table(a)
			}}}}, []string{
				"corp.example. 300 IN MX 10 mx.corp.example.",
				"mx.corp.example. 300 IN A 127.0.0.2",
			})
			res, err := dnscheck.New(dnscheck.Config{Servers: []string{w.dns.Addr}, Timeout: 500 * time.Millisecond, Attempts: 1})
			if err != nil {
				t.Fatal(err)
			}
			p, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: w.port, Resolver: res, Egress: loopbackAllowed(t), ReplyTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			// A State (not the gate's own memory, which wakes a waiter
			// when a slot frees) is asked again every poll: the asks
			// count the waiting.
			state := &countingState{State: politeness.NewMemoryState(nil)}
			gate := &politeness.Gate{State: state, Limits: politeness.Limits{Sessions: map[string]int{"*": 1}}}
			eng, err := verify.New(verify.Config{Resolver: res, Prober: verify.SMTP(p), Gate: gate, GateWait: gateWait})
			if err != nil {
				t.Fatal(err)
			}
			gate.MX = eng // as evs serve's runner keys its groups
			ctx := context.Background()
			key := gate.Key(ctx, "corp.example")
			batchAsks := int32(0)
			if tc.batch != nil {
				end := tc.batch(t, gate, key, func() { ended.Store(true) })
				defer end()
				batchAsks = 1
			}
			var d evs.Decision
			if tc.domain {
				d = eng.VerifyDomain(ctx, []string{tc.email}, evs.ModeFull)[0]
			} else {
				d = eng.Verify(ctx, verify.Inspect(tc.email), evs.ModeFull)
			}
			if d.Reason != tc.reason || !strings.Contains(d.Checks.SMTP.Detail, tc.detail) {
				t.Fatalf("%s: %s %+v", tc.email, d.Reason, d.Checks.SMTP)
			}
			switch asks := state.acquires.Load() - batchAsks; {
			case tc.waits && asks < 2:
				t.Errorf("the verification asked the gate %d times: it did not wait for the batch's session", asks)
			case tc.domain && asks != 0:
				t.Errorf("the batch path asked the gate %d times, want none: its caller admitted it", asks)
			}
			if n := early.Load(); tc.waits && n != 0 {
				t.Errorf("%d RCPTs came while the batch held the provider's session", n)
			}
			if deferred := tc.detail != ""; deferred != (w.smtp[0].Connections() == 0) || (deferred && d.Checks.SMTP.Result != evs.SMTPSkipped) {
				t.Errorf("deferred %v, yet %d connections, result %s", deferred, w.smtp[0].Connections(), d.Checks.SMTP.Result)
			}
			a, err := gate.Admit(ctx, key, 1)
			if err != nil || a.Paused != tc.pauses {
				t.Errorf("afterwards: %+v %v; want paused %v", a, err, tc.pauses)
			}
			_, _ = a.Done(ctx, false)
		})
	}
}

// hold is a batch that holds the provider's session, and ends it after
// d (0: when the test ends), telling ended first.
func hold(d time.Duration) func(t *testing.T, g *politeness.Gate, key string, ended func()) func() {
	return func(t *testing.T, g *politeness.Gate, key string, ended func()) func() {
		a := admitOK(t, g, key)
		end := func() { ended(); _, _ = a.Done(context.Background(), false) }
		if d > 0 {
			time.AfterFunc(d, end)
			return func() {}
		}
		return end
	}
}

// countingState counts the session slots asked of its State.
type countingState struct {
	politeness.State
	acquires atomic.Int32
}

func (c *countingState) AcquireSlot(ctx context.Context, key string, slots int, ttl time.Duration) (func(), bool, error) {
	c.acquires.Add(1)
	return c.State.AcquireSlot(ctx, key, slots, ttl)
}

func admitOK(t *testing.T, g *politeness.Gate, key string) politeness.Ticket {
	t.Helper()
	a, err := g.Admit(context.Background(), key, 2)
	if err != nil || !a.OK {
		t.Fatalf("the batch's session: %+v %v", a, err)
	}
	return a
}
