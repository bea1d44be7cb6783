package batch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
)

func TestRcptBound(t *testing.T) {
	t.Parallel()
	p := &batch.Processor{PerConnection: 50}
	for n, want := range map[int]int{0: 0, 1: 2, 50: 51, 51: 53, 200: 204} {
		if got := p.RcptBound(n); got != want {
			t.Errorf("RcptBound(%d) = %d, want %d", n, got, want)
		}
	}
	for budget := 1; budget <= 500; budget++ {
		n := p.ItemsWithin(budget)
		if p.RcptBound(n) > budget || (n+1 <= budget && p.RcptBound(n+1) <= budget) {
			t.Fatalf("ItemsWithin(%d) = %d: bound %d, next %d", budget, n, p.RcptBound(n), p.RcptBound(n+1))
		}
	}
}

// throttler answers a domain's first session with checks that throttle
// and every later one with accepted.
type throttler struct {
	first    evs.SMTPCheck
	sessions int
}

func (v *throttler) VerifyDomain(_ context.Context, emails []string, _ evs.Mode) []evs.Decision {
	v.sessions++
	ds := make([]evs.Decision, len(emails))
	for i := range ds {
		ds[i] = evs.Decision{Reason: evs.ReasonAcceptedEmail, Checks: evs.Checks{SMTP: evs.SMTPCheck{Result: evs.SMTPAccepted, Code: 250}}}
		if v.sessions == 1 && (v.first.Detail != "" || i == 1) {
			ds[i] = evs.Decision{Reason: evs.ReasonGreylisted, Checks: evs.Checks{SMTP: v.first}}
		}
	}
	return ds
}

func TestVerifyGroupThrottled(t *testing.T) {
	t.Parallel()
	var items []evs.Item
	for i := range 5 {
		items = append(items, evs.Item{Seq: i, Email: fmt.Sprintf("u%d@x.example", i), Domain: "x.example"})
	}
	g := batch.Group{Domain: "x.example", Items: items}

	// Refused at the banner: nothing asked, everything left, no result.
	v := &throttler{first: evs.SMTPCheck{Result: evs.SMTPGreylisted, Code: 421, EnhancedCode: "4.7.0", Detail: "the mail hosts asked us to try again later"}}
	p := &batch.Processor{Engine: v, PerConnection: 2}
	o, err := p.VerifyGroup(context.Background(), time.Time{}, false, evs.ModeFull, g, 0)
	if err != nil || !o.Throttled || len(o.Left) != 5 || len(o.Results)+len(o.Retry) != 0 || v.sessions != 1 {
		t.Fatalf("refused at open: %+v %v, %d sessions", o, err, v.sessions)
	}

	// 421 at the second RCPT of the first session: the answer before it
	// counts; the 421'd address waits for the pause at the same attempt
	// (a rate reply is not greylisting), and no further session starts.
	v = &throttler{first: evs.SMTPCheck{Result: evs.SMTPGreylisted, Code: 421, EnhancedCode: "4.7.0", Message: "closing connection"}}
	p = &batch.Processor{Engine: v, PerConnection: 2}
	o, err = p.VerifyGroup(context.Background(), time.Time{}, false, evs.ModeFull, g, 0)
	if err != nil || !o.Throttled || len(o.Results) != 1 || len(o.Retry) != 0 || len(o.Left) != 4 || o.Left[0].Seq != 1 || v.sessions != 1 {
		t.Fatalf("421 at RCPT: %+v %v, %d sessions", o, err, v.sessions)
	}

	// Test mode never counts as throttling.
	v = &throttler{first: evs.SMTPCheck{Result: evs.SMTPGreylisted, Code: 421, Detail: "the mail hosts asked us to try again later"}}
	p = &batch.Processor{Sandbox: v, PerConnection: 2}
	if o, _ = p.VerifyGroup(context.Background(), time.Time{}, true, evs.ModeFull, g, 0); o.Throttled || len(o.Left) != 0 {
		t.Fatalf("test mode: %+v", o)
	}
}
