package verify_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// fakeRep is a Reputation whose listed addresses are a set; each question
// about a list first waits for gate, when set.
type fakeRep struct {
	mu     sync.Mutex
	listed map[netip.Addr]bool
	asked  atomic.Int32
	gate   chan struct{}
	// hang, when set, makes each question wait for its context's end.
	hang atomic.Bool
}

func (r *fakeRep) Blocklisted(ctx context.Context, ip netip.Addr, zone string) verify.Listing {
	r.asked.Add(1)
	if r.gate != nil {
		<-r.gate
	}
	if r.hang.Load() {
		<-ctx.Done()
		return verify.Listing{Zone: zone, Error: ctx.Err().Error()}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return verify.Listing{Zone: zone, Listed: r.listed[ip]}
}

func (r *fakeRep) ConfirmHELO(ctx context.Context, name string, ip netip.Addr) verify.HELOCheck {
	return verify.HELOCheck{OK: true}
}

func (r *fakeRep) set(ip string, listed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.listed == nil {
		r.listed = map[netip.Addr]bool{}
	}
	r.listed[netip.MustParseAddr(ip)] = listed
}

// answer is a live verdict from host's server: a refusal of us when
// blocked, else an accept.
func answer(host string, blocked bool) evs.Decision {
	d := evs.Decision{Reason: evs.ReasonAcceptedEmail}
	d.Checks.SMTP.Host, d.Checks.SMTP.Code = host, 250
	if blocked {
		d.Reason, d.Checks.SMTP.Code = evs.ReasonBlocked, 554
	}
	return d
}

// TestEgressWatchHigh: the rule an exit is avoided for a provider by, at
// its edges: at least AvoidAnswered answers in the window, at least
// AvoidShare of them refusals of us; answers older than BlockedWindow and
// verdicts with no reply or made up in test mode do not count.
func TestEgressWatchHigh(t *testing.T) {
	t.Parallel()
	noReply := evs.Decision{Reason: evs.ReasonBlocked}
	testMode := answer("mx.a.example", true)
	testMode.TestMode = true
	cases := []struct {
		name             string
		accepts, refusal int
		age              time.Duration // of the answers, at the question
		also             []evs.Decision
		want             bool
	}{
		{"4 refusals of 4: too few answers", 0, 4, 0, nil, false},
		{"5 refusals of 5", 0, 5, 0, nil, true},
		{"3 refusals of 6: half", 3, 3, 0, nil, true},
		{"3 refusals of 7: less than half", 4, 3, 0, nil, false},
		{"5 refusals of 5, 14 minutes ago", 0, 5, 14 * time.Minute, nil, true},
		{"5 refusals of 5, 16 minutes ago", 0, 5, 16 * time.Minute, nil, false},
		{"4 refusals, one with no reply and one in test mode", 0, 4, 0, []evs.Decision{noReply, testMode}, false},
	}
	for _, c := range cases {
		now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
		w := verify.NewEgressWatch(verify.Egress{Name: "direct"}, func() time.Time { return now })
		for range c.accepts {
			w.Observe(answer("mx.a.example", false))
		}
		for range c.refusal {
			w.Observe(answer("mx.a.example", true))
		}
		w.Observe(c.also...)
		now = now.Add(c.age)
		if got := w.High("other"); got != c.want {
			t.Errorf("%s: High = %v, want %v (shares %+v)", c.name, got, c.want, w.Shares())
		}
	}
}

// TestEgressWatchesSteer: with two exits, the watches steer the exits as
// evs serve's do. A provider's host that goes to exit A goes to B while
// A's last self-check finds its address listed, or while A's refusals for
// that provider are high; back to A once A is found clean. Each counted
// answer is told under the exit it went through.
func TestEgressWatchesSteer(t *testing.T) {
	t.Parallel()
	exits, err := config.ParseSMTPExits("socks5://127.0.0.1:9#127.0.0.41,socks5://127.0.0.2:9#127.0.0.42")
	if err != nil {
		t.Fatal(err)
	}
	c := config.Config{SMTPExits: exits}
	x, err := verify.NewExits(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	host := ""
	for _, h := range []string{"mx.p0.example", "mx.p1.example", "mx.p2.example", "mx.p3.example", "mx.p4.example", "mx.p5.example"} {
		if x.For(h) == 0 {
			host = h
			break
		}
	}
	if host == "" {
		t.Fatal("no host on exit A")
	}
	type told struct {
		egress, provider string
		blocked          bool
	}
	var counted []told
	ws := verify.WatchEgress(c, x, time.Now, func(egress, provider string, blocked bool) {
		counted = append(counted, told{egress, provider, blocked})
	})
	rep := &fakeRep{}
	check := func() {
		ws.SelfCheck(context.Background(), rep, []string{"bl.test"}, "", slog.New(slog.DiscardHandler), nil)
	}
	steps := []struct {
		name   string
		change func()
		want   int
	}{
		{"clean", check, 0},
		{"A listed", func() { rep.set("127.0.0.41", true); check() }, 1},
		{"A delisted", func() { rep.set("127.0.0.41", false); check() }, 0},
		{"A refused 5 times", func() {
			for range 5 {
				ws.Observe(context.Background(), answer(host, true))
			}
		}, 1},
	}
	for _, s := range steps {
		s.change()
		if got := x.For(host); got != s.want {
			t.Errorf("%s: %s goes to exit %d, want %d", s.name, host, got, s.want)
		}
	}
	ws.Observe(context.Background(), answer(host, false))
	if len(counted) != 6 || counted[0] != (told{exits[0].Name, "other", true}) || counted[5] != (told{exits[1].Name, "other", false}) {
		t.Errorf("counted %+v", counted)
	}
}

// TestSelfCheckerDue: Due starts a check in the background only when the
// last started more than Every ago, never two at once, and never waits
// for one; Run checks at once.
func TestSelfCheckerDue(t *testing.T) {
	t.Parallel()
	c := config.Config{EgressIP: netip.MustParseAddr("127.0.0.41")}
	rep := &fakeRep{gate: make(chan struct{})}
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	done := make(chan verify.EgressCheck, 10)
	s := &verify.SelfChecker{Watches: verify.WatchEgress(c, nil, clock, nil), Rep: rep, Zones: []string{"bl.test"},
		Every: time.Hour, Now: clock, Done: func(_ string, c verify.EgressCheck) { done <- c }}

	finish := func(step string) {
		t.Helper()
		select {
		case rep.gate <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no check started", step)
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the check did not finish", step)
		}
	}
	// The check is held at rep's gate until finish: Due returns without it.
	returned := make(chan struct{}, 1)
	go func() {
		s.Due() // the first: due at once
		s.Due() // one is running: no second
		returned <- struct{}{}
	}()
	testkit.Receive(t, returned, 10*time.Second, "Due to return while its check is held")
	if len(done) != 0 {
		t.Fatal("the check finished before its gate was opened")
	}
	finish("first")
	advance(59 * time.Minute)
	s.Due() // fresh: nothing
	advance(2 * time.Minute)
	s.Due() // older than Every: again
	finish("after an hour")
	if n := rep.asked.Load(); n != 2 {
		t.Errorf("%d checks before Run, want 2", n)
	}
	// Run does not wait for Every: the schedule's message checks now.
	ran := make(chan struct{})
	go func() { s.Run(context.Background()); close(ran) }()
	finish("Run")
	<-ran
	if n := rep.asked.Load(); n != 3 {
		t.Errorf("%d checks after Run, want 3", n)
	}
}

// TestSelfCheckerCutShort: a check its timeout cut short (on Lambda, an
// instance frozen between invocations past it) keeps the last whole
// findings, so a listed exit stays avoided, tells nothing, and the next
// call checks again at once.
func TestSelfCheckerCutShort(t *testing.T) {
	t.Parallel()
	c := config.Config{EgressIP: netip.MustParseAddr("127.0.0.41")}
	rep := &fakeRep{}
	rep.set("127.0.0.41", true)
	var told atomic.Int32
	ws := verify.WatchEgress(c, nil, time.Now, nil)
	s := &verify.SelfChecker{Watches: ws, Rep: rep, Zones: []string{"bl.test"}, Every: time.Hour, Timeout: 50 * time.Millisecond,
		Done: func(string, verify.EgressCheck) { told.Add(1) }}
	s.Run(context.Background())
	if !ws.Watches()[0].Listed() || told.Load() != 1 {
		t.Fatalf("first check: listed %v, told %d", ws.Watches()[0].Listed(), told.Load())
	}
	rep.hang.Store(true)
	s.Run(context.Background())
	if !ws.Watches()[0].Listed() || told.Load() != 1 {
		t.Fatalf("a check cut short: listed %v, told %d; want the listing kept and nothing told", ws.Watches()[0].Listed(), told.Load())
	}
	rep.hang.Store(false)
	rep.set("127.0.0.41", false)
	s.Due() // within Every of the last start, but that one was cut short
	testkit.Eventually(t, 5*time.Second, func() error {
		if ws.Watches()[0].Listed() || told.Load() != 2 {
			return fmt.Errorf("no check after the one cut short: listed %v, told %d", ws.Watches()[0].Listed(), told.Load())
		}
		return nil
	})
}
