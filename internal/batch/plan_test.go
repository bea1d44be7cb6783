package batch_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
)

// TestPlanRecheck: a new batch's plan reads its input unchecked (none of
// it can have results), while a plan that may find results (a sweep's
// re-plan, a redelivered plan) leaves out what has them and marks its
// work and its next window to check again, as a redelivery does.
func TestPlanRecheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acct := e.account(true)
	var emails []string
	for i := range 10 {
		emails = append(emails, fmt.Sprintf("u%d@d%d.example", i, i%3))
	}
	b := e.batch(acct, time.Now(), emails...)
	if _, err := e.st.TransitionBatch(e.ctx, acct, b.ID, []evs.State{evs.StateQueued}, evs.StateRunning, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	done := []int{1, 4, 5, 8}
	var rs []evs.Result
	for _, seq := range done {
		rs = append(rs, evs.Result{Seq: seq, Email: emails[seq], Decision: evs.Decision{Email: emails[seq], Mode: evs.ModeFull, Reason: evs.ReasonAcceptedEmail}})
	}
	if _, err := e.st.PutResults(e.ctx, acct, b.ID, rs, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		m           batch.Message
		redelivered bool
		want        []int // seqs planned
		recheck     bool
	}{
		{"new batch", batch.PlanMessage(b), false, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, false},
		{"sweep re-plan", batch.ReplanMessage(b), false, []int{0, 2, 3, 6, 7, 9}, true},
		{"redelivered plan", batch.PlanMessage(b), true, []int{0, 2, 3, 6, 7, 9}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &memQueue{}
			w := localWorker(batch.Worker{Queue: q, Store: e.st, PlanWindow: 4}, e.st, nil)
			var got []int
			m := tc.m
			for range 20 { // every window, each plan sending the next
				if err := w.Handle(e.ctx, m, tc.redelivered, time.Time{}); err != nil {
					t.Fatal(err)
				}
				next := (*batch.Message)(nil)
				for _, r := range q.take(100) {
					switch r.m.Kind {
					case batch.KindWork:
						if r.m.Recheck != tc.recheck {
							t.Errorf("work message Recheck = %v, want %v", r.m.Recheck, tc.recheck)
						}
						for _, it := range r.m.Items {
							got = append(got, it.Seq)
						}
					case batch.KindPlan:
						if r.m.Recheck != tc.recheck {
							t.Errorf("next plan's Recheck = %v, want %v", r.m.Recheck, tc.recheck)
						}
						r.m.Planned = 0 // plan the next window now, its work not done
						next = &r.m
					}
				}
				if next == nil {
					break
				}
				m = *next
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("planned seqs %v, want %v", got, tc.want)
			}
		})
	}
}
