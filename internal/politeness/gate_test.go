package politeness_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/evs-dev/evs/internal/politeness"
)

// mxOf is a PreferredMX from a table.
type mxOf map[string]string

func (m mxOf) PreferredMX(_ context.Context, domain string) (string, bool) {
	h, ok := m[domain]
	return h, ok
}

// TestGateKeysByProvider: every Microsoft 365 tenant's host is one
// provider; an unknown host is its registrable domain; the egress address
// is part of the key.
func TestGateKeysByProvider(t *testing.T) {
	g := &politeness.Gate{MX: mxOf{
		"a.example": "a-example.mail.protection.outlook.com", "b.example": "b-example.mail.protection.outlook.com",
		"c.example": "mx1.hosting.co.uk", "d.example": "mx2.hosting.co.uk",
	}, Egress: "proxy.example"}
	ctx := context.Background()
	if a, b := g.Key(ctx, "a.example"), g.Key(ctx, "b.example"); a != b || a != "microsoft365|proxy.example" {
		t.Errorf("tenants: %q, %q", a, b)
	}
	if c, d := g.Key(ctx, "c.example"), g.Key(ctx, "d.example"); c != d || c != "hosting.co.uk|proxy.example" {
		t.Errorf("hosting: %q, %q", c, d)
	}
	if k := (&politeness.Gate{}).Key(ctx, "e.example"); k != "e.example|direct" {
		t.Errorf("no MX: %q", k)
	}
}

func TestLimitsFor(t *testing.T) {
	var none politeness.Limits
	if s, r := none.For("google"); s != 10 || r != 300 {
		t.Errorf("google defaults %d, %d", s, r)
	}
	if s, r := none.For("example.com"); s != 2 || r != 60 {
		t.Errorf("other defaults %d, %d", s, r)
	}
	l := politeness.Limits{Sessions: map[string]int{"*": 3, "google": 20, "gateway": 5}, RcptPerMin: map[string]int{"large": 100}}
	for p, want := range map[string][2]int{"google": {20, 100}, "yahoo": {3, 100}, "mimecast": {5, 120}, "example.com": {3, 60}} {
		if s, r := l.For(p); s != want[0] || r != want[1] {
			t.Errorf("%s: %d, %d; want %v", p, s, r, want)
		}
	}
	if s, r := l.ForKey("google|proxy.example"); s != 20 || r != 100 {
		t.Errorf("ForKey: %d, %d", s, r)
	}
}

// admit is Admit that must not fail.
func admit(t *testing.T, g *politeness.Gate, rcpts int) politeness.Ticket {
	t.Helper()
	a, err := g.Admit(context.Background(), "k|direct", rcpts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func done(t *testing.T, a politeness.Ticket, throttled bool) time.Time {
	t.Helper()
	until, err := a.Done(context.Background(), throttled)
	if err != nil {
		t.Fatal(err)
	}
	return until
}

// TestGateSessionsAndPause: at most the provider's sessions are open; a
// throttled session pauses the provider for everyone, for PauseBase, then
// twice that after another throttled session, and a clean session ends the
// run of pauses. The gate's timers run on a synctest bubble's clock: the
// waiter is seen to wait (synctest.Wait) rather than given time to.
func TestGateSessionsAndPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
		g := &politeness.Gate{Now: func() time.Time { return now }, PauseBase: time.Minute, PauseMax: 3 * time.Minute,
			Limits: politeness.Limits{Sessions: map[string]int{"*": 2}}}
		a1, a2 := admit(t, g, 4), admit(t, g, 4)
		if !a1.OK || !a2.OK {
			t.Fatalf("two sessions of two: %+v %+v", a1, a2)
		}
		if a := admit(t, g, 2); a.OK || !a.ForSlot || a.Paused {
			t.Fatalf("a third session beside two: %+v", a)
		}
		// A waiter is woken by the end of a session, and sees the pause it
		// started.
		got := make(chan politeness.Ticket)
		go func() {
			a, _ := g.Wait(context.Background(), []string{"k|direct"}, 2, 0)
			got <- a
		}()
		synctest.Wait() // it waits
		until := done(t, a1, true)
		if want := now.Add(time.Minute); !until.Equal(want) {
			t.Fatalf("pause until %v, want %v", until, want)
		}
		if a := <-got; a.OK || !a.Paused || !a.Retry.Equal(until) {
			t.Fatalf("the waiter during the pause: %+v", a)
		}
		// The other session met the same refusal: one pause, not a doubled one.
		if u := done(t, a2, true); !u.Equal(until) {
			t.Fatalf("second throttled session moved the pause to %v", u)
		}
		for _, want := range []time.Duration{2 * time.Minute, 3 * time.Minute} { // doubling, to the cap
			now = until
			if u := done(t, admit(t, g, 2), true); !u.Equal(now.Add(want)) {
				t.Fatalf("next pause in a row %v, want %v", u.Sub(now), want)
			}
			until = now.Add(want)
		}
		now = until
		done(t, admit(t, g, 2), false)
		if u := done(t, admit(t, g, 2), true); !u.Equal(now.Add(time.Minute)) {
			t.Fatalf("after a clean session the pause is %v, want back to 1 min", u.Sub(now))
		}
	})
}

// TestGateRcptBudget: the RCPT commands of a window are the limit; what
// is spent refills at the limit's rate, and a session that does not fit
// is told when it will.
func TestGateRcptBudget(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	g := &politeness.Gate{Now: func() time.Time { return now }, Limits: politeness.Limits{RcptPerMin: map[string]int{"*": 600}}}
	done(t, admit(t, g, 1000), false) // counted as a whole window's budget
	a := admit(t, g, 100)
	if a.OK || a.ForSlot || a.Paused || !a.Retry.Equal(now.Add(10*time.Second)) {
		t.Fatalf("100 more RCPTs at once after spending the minute's budget: %+v", a)
	}
	// Its slot went back: a session that needs what refilled is admitted.
	now = now.Add(10 * time.Second)
	if a := admit(t, g, 100); !a.OK || a.Rcpts != 100 || !a.Retry.IsZero() {
		t.Fatalf("after 10 s at 10 a second: %+v", a)
	} else {
		done(t, a, false)
	}
	// Less than asked for is what is left, and the rest comes later ...
	now = now.Add(5 * time.Second)
	if a := admit(t, g, 100); !a.OK || a.Rcpts != 50 || !a.Retry.Equal(now.Add(10*time.Second)) {
		t.Fatalf("100 when 50 refilled: %+v", a)
	} else {
		done(t, a, false)
	}
	// ... as long as one address and its probe fit.
	now = now.Add(150 * time.Millisecond)
	if a := admit(t, g, 100); a.OK || a.ForSlot || !a.Retry.Equal(now.Add(9850*time.Millisecond)) {
		t.Fatalf("100 when 1.5 refilled: %+v", a)
	}
}

// TestGateSpreadsOverExits: each exit a host may leave from has a budget
// of its own; AdmitAny takes the preferred exit's while it lasts (what is
// left of it too), then the next's, and with every budget spent answers
// the refusal that ends first. No exit in rotation: the gate's Egress.
func TestGateSpreadsOverExits(t *testing.T) {
	ctx, now := context.Background(), time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	exits := []string{"exit-b", "exit-a"}
	g := &politeness.Gate{Now: func() time.Time { return now }, Egress: "exit-a+exit-b", Exits: func(string) []string { return exits },
		Limits: politeness.Limits{Sessions: map[string]int{"*": 10}, RcptPerMin: map[string]int{"*": 60}}}
	keys := g.HostKeys("mx.example.net")
	if len(keys) != 2 || keys[0] != "example.net|exit-b" || g.HostKey("mx.example.net") != keys[0] {
		t.Fatalf("keys %v", keys)
	}
	for i, want := range []struct {
		key   string
		rcpts int
	}{{keys[0], 40}, {keys[0], 20}, {keys[1], 40}, {keys[1], 20}} {
		a, err := g.AdmitAny(ctx, keys, 40)
		if err != nil || !a.OK || a.Key != want.key || a.Rcpts != want.rcpts {
			t.Fatalf("session %d: %+v %v; want %d on %s", i+1, a, err, want.rcpts, want.key)
		}
		done(t, a, false)
	}
	if a, err := g.AdmitAny(ctx, keys, 40); err != nil || a.OK || a.Key != keys[0] || !a.Retry.Equal(now.Add(40*time.Second)) {
		t.Fatalf("every budget spent: %+v %v", a, err)
	}
	exits = nil
	if k := g.HostKeys("mx.example.net"); len(k) != 1 || k[0] != "example.net|exit-a+exit-b" {
		t.Fatalf("no exit in rotation: %v", k)
	}
}

// TestGateWaitBounds: Wait waits for a slot until its context ends, and
// for a pause or the budget only when that ends within its bound.
func TestGateWaitBounds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		hold        func(t *testing.T, g *politeness.Gate) // what keeps the session out
		most        time.Duration
		ok, forSlot bool
	}{
		{"slot held past the context", func(t *testing.T, g *politeness.Gate) { admit(t, g, 1) }, time.Second, false, true},
		{"slot freed during the wait", func(t *testing.T, g *politeness.Gate) {
			a := admit(t, g, 1)
			time.AfterFunc(30*time.Millisecond, func() { _, _ = a.Done(context.Background(), false) })
		}, time.Second, true, false},
		{"pause longer than the bound", func(t *testing.T, g *politeness.Gate) { done(t, admit(t, g, 1), true) }, time.Second, false, false},
		{"budget back within the bound", func(t *testing.T, g *politeness.Gate) { done(t, admit(t, g, 60), false) }, 2 * time.Second, true, false},
		{"budget back past the bound", func(t *testing.T, g *politeness.Gate) { done(t, admit(t, g, 60), false) }, 100 * time.Millisecond, false, false},
	} {
		// On the bubble's clock: a wait is measured exactly, and takes
		// no real time.
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := &politeness.Gate{PauseBase: time.Minute,
					Limits: politeness.Limits{Sessions: map[string]int{"*": 1}, RcptPerMin: map[string]int{"*": 60}}}
				tc.hold(t, g)
				ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
				defer cancel()
				start := time.Now()
				a, err := g.Wait(ctx, []string{"k|direct"}, 1, tc.most)
				if err != nil || a.OK != tc.ok || a.ForSlot != tc.forSlot {
					t.Fatalf("Wait: %+v %v", a, err)
				}
				if waited := time.Since(start); !tc.ok && !tc.forSlot && waited != 0 {
					t.Fatalf("waited %v for a refusal it could not outwait", waited)
				}
				_, _ = a.Done(ctx, false)
			})
		})
	}
}

// TestExtraSlot: a group's further sessions take session slots like any
// session, and no RCPT commands: with 3 slots and a budget spent by the
// admitted group, two more sessions open and a third does not; one that
// goes back lets another open; a pause refuses them, in memory and in a
// State of its own alike.
func TestExtraSlot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state politeness.State
	}{{"memory", nil}, {"a State", politeness.NewMemoryState(nil)}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g := &politeness.Gate{State: tc.state, Limits: politeness.Limits{Sessions: map[string]int{"*": 3}, RcptPerMin: map[string]int{"*": 10}}}
			const key = "k|direct"   // admit's
			first := admit(t, g, 10) // the whole budget
			var releases []func()
			for i := range 3 {
				release, ok, err := g.ExtraSlot(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if ok != (i < 2) {
					t.Fatalf("extra slot %d: ok %v with 3 slots", i+1, ok)
				}
				if ok {
					releases = append(releases, release)
				}
			}
			releases[0]()
			release, ok, err := g.ExtraSlot(ctx, key)
			if err != nil || !ok {
				t.Fatalf("a slot went back, yet: %v %v", ok, err)
			}
			release()
			releases[1]()
			if _, err := first.Done(ctx, true); err != nil { // throttled: paused
				t.Fatal(err)
			}
			if _, ok, err := g.ExtraSlot(ctx, key); ok || err != nil {
				t.Fatalf("paused provider: ok %v, %v", ok, err)
			}
		})
	}
}

// busyState is a shared State whose slots are all taken and whose reads,
// after the first, take until the caller's context ends: a store that
// slows down while a call waits for a slot.
type busyState struct{ reads int }

func (s *busyState) AcquireSlot(ctx context.Context, _ string, _ int, _ time.Duration) (func(), bool, error) {
	if s.reads++; s.reads > 1 {
		<-ctx.Done()
		return nil, false, ctx.Err()
	}
	return nil, false, nil
}

func (s *busyState) ReserveRcpts(_ context.Context, _ string, _, most, _ int, _ time.Duration, _ time.Time) (int, time.Time, error) {
	return most, time.Time{}, nil
}

func (s *busyState) PauseState(context.Context, string) (time.Time, int, error) {
	return time.Time{}, 0, nil
}

func (s *busyState) Pause(_ context.Context, _ string, now time.Time, _ func(int) time.Duration) (time.Time, error) {
	return now, nil
}

func (s *busyState) ClearPause(context.Context, string, time.Time) error { return nil }

// TestGateWaitEndsOnTheRefusal: a wait for a slot whose time runs out
// during a later look at the state answers with the refusal it read (every
// slot in use), not with a fault of the state.
func TestGateWaitEndsOnTheRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &politeness.Gate{State: &busyState{}, Limits: politeness.Limits{Sessions: map[string]int{"*": 1}}}
		end, why := g.Session(context.Background(), "mx.example.net", time.Second)
		if end != nil || why != "skipped: deferred by our politeness limits: every SMTP session we allow to example.net at once is in use; retry in 1 s" {
			t.Fatalf("admitted %v, deferred for %q; want the slots in use", end != nil, why)
		}
	})
}
