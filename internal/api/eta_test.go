package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

// budgets is api.Budgets from a table: a domain's provider and its RCPT
// budget a minute; a domain not in it is its own provider at 60.
type budgets map[string]struct {
	provider string
	rcpt     int
}

func (b budgets) Budget(_ context.Context, domain string) (string, int) {
	if v, ok := b[domain]; ok {
		return v.provider, v.rcpt
	}
	return domain, 60
}

// TestBatchEstimate: an unfinished request shows its deadline and when it
// should be done at the earliest, from its creation on: the later of its
// slowest provider lane at the provider's budget and its pace so far. A
// request that cannot finish in time says so at once.
func TestBatchEstimate(t *testing.T) {
	var st *sqlitestore.Store
	f := newFixtureWith(t, func(d *api.Deps) {
		st = d.Batches.(*sqlitestore.Store)
		d.BatchDeadline = 30 * time.Minute
		// Two domains at one provider share its budget.
		d.Budgets = budgets{"big.example": {"bigmail", 100}, "big2.example": {"bigmail", 100}}
	})
	ctx := context.Background()
	var emails []string
	for i := range 1000 {
		emails = append(emails, fmt.Sprintf("u%d@big%s.example", i, map[bool]string{true: "", false: "2"}[i%2 == 0]))
	}
	for i := range 100 { // under a lane's least: no lane of its own
		emails = append(emails, fmt.Sprintf("u%d@small.example", i))
	}
	list, _ := json.Marshal(emails)
	post := func(mode string, test bool) (string, etaEnvelope) {
		ev := f.event("acct-1", http.MethodPost, "/v1/requests", nil, `{"emails":`+string(list)+`,"mode":"`+mode+`"}`, nil)
		ev.RequestContext.Authorizer["testMode"] = fmt.Sprint(test)
		r, _ := f.fn(ctx, ev)
		var e etaEnvelope
		decode(t, ev, r, &e)
		if r.StatusCode != http.StatusCreated {
			t.Fatalf("create: %d %s", r.StatusCode, r.Body)
		}
		return e.Request.ID, e
	}
	get := func(id string) etaEnvelope {
		ev := f.event("acct-1", http.MethodGet, "/v1/requests/{id}", map[string]string{"id": id}, "", nil)
		r, _ := f.fn(ctx, ev)
		var e etaEnvelope
		decode(t, ev, r, &e)
		return e
	}
	at := func(d time.Duration) string { return epoch.Add(d).Format("2006-01-02T15:04:05.000Z") }

	id, e := post("full", false)
	// 1,000 addresses at bigmail, 10 accept-all probes (a session of 100
	// each), 100 a minute.
	if e.Request.DeadlineAt != at(30*time.Minute) || e.Request.EstimatedCompletionAt != at(10*time.Minute+6*time.Second) {
		t.Fatalf("at creation: deadline %q, estimate %q; want %q, %q", e.Request.DeadlineAt, e.Request.EstimatedCompletionAt, at(30*time.Minute), at(10*time.Minute+6*time.Second))
	}
	if g := get(id); g.Request != e.Request {
		t.Fatalf("GET = %+v, want %+v", g.Request, e.Request)
	}
	// Test mode and quick mode probe no mail server: no lanes, no estimate
	// until the pace says one.
	for _, c := range []struct {
		mode string
		test bool
	}{{"full", true}, {"quick", false}} {
		if _, e := post(c.mode, c.test); e.Request.EstimatedCompletionAt != "" || e.Request.DeadlineAt != at(30*time.Minute) {
			t.Errorf("%s, test %v: %+v", c.mode, c.test, e.Request)
		}
	}

	done := func(n int) {
		var rs []evs.Result
		for i := range n {
			rs = append(rs, evs.Result{Seq: i, Email: emails[i], Decision: evs.Decision{Email: emails[i], Mode: evs.ModeFull, Reason: evs.ReasonAcceptedEmail}})
		}
		if _, err := st.PutResults(ctx, "acct-1", id, rs, f.clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// Half done in two minutes: the pace says four, the lane ten.
	f.clock.Set(epoch.Add(2 * time.Minute))
	done(550)
	if g := get(id); g.Request.EstimatedCompletionAt != at(10*time.Minute+6*time.Second) {
		t.Errorf("half done at 2 min: estimate %q, want the lane's end", g.Request.EstimatedCompletionAt)
	}
	// Slower than the lane: at 24 min, 550 of 1,100 done, the pace says
	// 48 min, past the deadline.
	f.clock.Set(epoch.Add(24 * time.Minute))
	if g := get(id); g.Request.EstimatedCompletionAt != at(48*time.Minute) {
		t.Errorf("half done at 24 min: estimate %q, want %q", g.Request.EstimatedCompletionAt, at(48*time.Minute))
	}
	// Cancelled: final, neither shown.
	ev := f.event("acct-1", http.MethodPost, "/v1/requests/{id}/cancel", map[string]string{"id": id}, "", nil)
	if r, _ := f.fn(ctx, ev); r.StatusCode != http.StatusOK || strings.Contains(r.Body, "deadlineAt") || strings.Contains(r.Body, "estimatedCompletionAt") {
		t.Fatalf("cancel: %d %s", r.StatusCode, r.Body)
	}
}

type etaEnvelope struct {
	Request struct {
		ID                    string `json:"id"`
		DeadlineAt            string `json:"deadlineAt"`
		EstimatedCompletionAt string `json:"estimatedCompletionAt"`
	} `json:"request"`
}
