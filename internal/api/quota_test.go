package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

// A daily address quota on the Lambda handlers: a batch that could not be
// queued gives its charge back, and the refusal's Retry-After runs to UTC
// midnight.
func TestDailyQuotaRefundsUnqueuedBatch(t *testing.T) {
	f := newFixtureWith(t, func(d *api.Deps) {
		d.Quota = api.Quota{Store: d.Batches.(*sqlitestore.Store), Limit: 2, Period: api.QuotaDay}
	})
	ctx := context.Background()
	f.q.fail = evs.Wrap(errors.New("queue down"), evs.CodeUnavailable, "The queue is unavailable.")
	ev := f.event("acct-1", http.MethodPost, "/v1/requests", nil, `{"emails":["a@x.example","b@x.example"]}`, nil)
	if r, _ := f.fn(ctx, ev); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("unqueued batch: %d %s", r.StatusCode, r.Body)
	}
	for i := range 2 {
		ev := f.event("acct-1", http.MethodPost, "/v1/verify", nil, `{"email":"accepted_email@x.example"}`, nil)
		if r, _ := f.fn(ctx, ev); r.StatusCode != http.StatusOK {
			t.Fatalf("verify %d after the refund: %d %s", i+1, r.StatusCode, r.Body)
		}
	}
	ev = f.event("acct-1", http.MethodPost, "/v1/verify", nil, `{"email":"accepted_email@x.example"}`, nil)
	r, _ := f.fn(ctx, ev)
	var e errorBody
	decode(t, ev, r, &e)
	// epoch is 10:00 UTC: 14 hours to the next day.
	if r.StatusCode != http.StatusTooManyRequests || e.Error.Code != evs.CodeRateLimited || r.Headers["Retry-After"] != "50400" {
		t.Fatalf("over the daily quota: %d %v %s", r.StatusCode, r.Headers, r.Body)
	}
}
