package batch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
)

// mxOf is a PreferredMX from a table.
type mxOf map[string]string

func (m mxOf) PreferredMX(_ context.Context, domain string) (string, bool) {
	h, ok := m[domain]
	return h, ok
}

func items(n int) []evs.Item {
	out := make([]evs.Item, n)
	for i := range out {
		out[i] = evs.Item{Seq: i, Email: fmt.Sprintf("u%d@x.example", i), Domain: "x.example"}
	}
	return out
}

// TestGateKeysByProvider: every Microsoft 365 tenant's host is one
// provider; an unknown host is its registrable domain; the egress address
// is part of the key.
func TestGateKeysByProvider(t *testing.T) {
	g := &batch.Gate{MX: mxOf{
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
	if k := (&batch.Gate{}).Key(ctx, "e.example"); k != "e.example|direct" {
		t.Errorf("no MX: %q", k)
	}
}

// TestGateSessionsAndPause: at most the provider's sessions are open; a
// throttled session pauses the provider for everyone, for PauseBase, then
// twice that after another throttled session, and a clean session ends the
// run of pauses.
func TestGateSessionsAndPause(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	g := &batch.Gate{Now: func() time.Time { return now }, PauseBase: time.Minute, PauseMax: 3 * time.Minute,
		Limits: batch.Limits{Sessions: map[string]int{"*": 2}}}
	p := &batch.Processor{PerConnection: 50}
	ctx := context.Background()
	a1, err := g.Admit(ctx, "k", items(3), p)
	if err != nil || len(a1.Run) != 3 || len(a1.Rest) != 0 {
		t.Fatalf("first: %+v %v", a1, err)
	}
	a2, _ := g.Admit(ctx, "k", items(3), p)
	// A third waits for a slot.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := g.Admit(short, "k", items(1), p); err == nil {
		t.Fatal("a third session was admitted beside two")
	}
	got := make(chan batch.Admission)
	go func() {
		a, _ := g.Admit(ctx, "k", items(1), p)
		got <- a
	}()
	until := a1.Done(true)
	if want := now.Add(time.Minute); !until.Equal(want) {
		t.Fatalf("pause until %v, want %v", until, want)
	}
	// The waiter gets the slot, but the provider is paused: nothing runs.
	if a := <-got; len(a.Run) != 0 || len(a.Rest) != 1 || !a.Until.Equal(until) {
		t.Fatalf("during the pause: %+v", a)
	}
	// The other session, which ran beside it, met the same refusal: one
	// pause, not a doubled one.
	if u := a2.Done(true); !u.Equal(until) {
		t.Fatalf("second throttled session moved the pause to %v", u)
	}
	now = now.Add(time.Minute)
	a3, _ := g.Admit(ctx, "k", items(1), p)
	if u := a3.Done(true); !u.Equal(now.Add(2 * time.Minute)) {
		t.Fatalf("second pause in a row until %v, want 2 min", u)
	}
	now = now.Add(2 * time.Minute)
	a4, _ := g.Admit(ctx, "k", items(1), p)
	if u := a4.Done(true); !u.Equal(now.Add(3 * time.Minute)) {
		t.Fatalf("third pause until %v, want the 3 min cap", u)
	}
	now = now.Add(3 * time.Minute)
	a5, _ := g.Admit(ctx, "k", items(1), p)
	a5.Done(false)
	a6, _ := g.Admit(ctx, "k", items(1), p)
	if u := a6.Done(true); !u.Equal(now.Add(time.Minute)) {
		t.Fatalf("after a clean session the pause is %v, want back to 1 min", u.Sub(now))
	}
}

// TestGateRcptBudget: a group larger than a minute's RCPT budget runs the
// part that fits and hands the rest back; the next part waits until the
// budget refills.
func TestGateRcptBudget(t *testing.T) {
	g := &batch.Gate{Limits: batch.Limits{RcptPerMin: map[string]int{"*": 600}}}
	p := &batch.Processor{PerConnection: 50}
	a, err := g.Admit(context.Background(), "k", items(1000), p)
	if err != nil {
		t.Fatal(err)
	}
	if p.RcptBound(len(a.Run)) > 600 || len(a.Run)+len(a.Rest) != 1000 || len(a.Rest) == 0 {
		t.Fatalf("run %d (bound %d), rest %d", len(a.Run), p.RcptBound(len(a.Run)), len(a.Rest))
	}
	a.Done(false)
	// The budget is spent: the next session waits for tokens (600 a
	// minute is 10 a second), so a short deadline ends its wait.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := g.Admit(ctx, "k", items(100), p); err == nil {
		t.Fatal("admitted 100 more RCPTs at once after spending the minute's budget")
	}
	// Its slot went back: a session that needs no more than what refilled
	// is admitted.
	if _, err := g.Admit(context.Background(), "k", items(1), p); err != nil {
		t.Fatal(err)
	}
}
