package server_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
)

// countingStore counts the batches the handlers ask the store to create,
// and passes the address quota's counters through.
type countingStore struct {
	server.Store
	quota   api.AddressQuota
	creates atomic.Int32
}

func (c *countingStore) CreateBatchWithin(ctx context.Context, b evs.Batch, items []evs.Item, maxActive int) error {
	c.creates.Add(1)
	return c.Store.CreateBatchWithin(ctx, b, items, maxActive)
}

func (c *countingStore) ChargeAddresses(ctx context.Context, accountID, period string, n, limit int, expires time.Time) (bool, error) {
	return c.quota.ChargeAddresses(ctx, accountID, period, n, limit, expires)
}

func (c *countingStore) RefundAddresses(ctx context.Context, accountID, period string, n int) error {
	return c.quota.RefundAddresses(ctx, accountID, period, n)
}

// The address quota through HTTP (EVS_QUOTA_ADDRESSES=3, month): each
// verify counts one address, a replay none; the fourth is 429 with
// Retry-After the seconds to the month's end; a batch counts its distinct
// addresses and one over what is left is refused whole, nothing created or
// charged; the next month starts afresh.
func TestAddressQuota(t *testing.T) {
	cs := &countingStore{}
	h := start(t, options{
		server: func(o *server.Options) { o.Config.QuotaAddresses, o.Config.QuotaPeriod = 3, "month" },
		wrapStore: func(s server.Store) server.Store {
			cs.Store, cs.quota = s, s.(api.AddressQuota)
			return cs
		},
	})
	verify := func(key, idem string) reply {
		t.Helper()
		r := req{method: http.MethodPost, path: "/v1/verify", key: key, body: `{"email":"accepted_email@x.example","mode":"quick"}`}
		if idem != "" {
			r.headers = map[string]string{"Idempotency-Key": idem}
		}
		return h.do(r)
	}
	for i, idem := range []string{"first", "first", "", ""} {
		if r := verify(h.testKey, idem); r.status != http.StatusOK {
			t.Fatalf("verify %d: %d %s", i+1, r.status, r.body)
		}
	}
	// 2026-11-22T10:00Z: the month ends in 8 days 14 hours.
	r := verify(h.testKey, "")
	if r.status != http.StatusTooManyRequests || r.errorCode(t) != "rate_limited" || r.header.Get("Retry-After") != "741600" ||
		!strings.Contains(string(r.body), "address quota") {
		t.Fatalf("over the quota: %d %v %s", r.status, r.header, r.body)
	}
	// A refusal is not kept under its Idempotency-Key, and charges nothing.
	if r := verify(h.testKey, "late"); r.status != http.StatusTooManyRequests || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("over the quota with a key: %d %v", r.status, r.header)
	}
	// Counters are per account.
	if r := verify(h.otherKey, ""); r.status != http.StatusOK {
		t.Fatalf("another account: %d %s", r.status, r.body)
	}

	// A new month: 3 addresses again.
	h.clock.Set(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	batch := func(emails string) reply {
		t.Helper()
		return h.do(req{method: http.MethodPost, path: "/v1/requests", key: h.testKey, body: `{"emails":[` + emails + `],"mode":"quick"}`})
	}
	// Two distinct addresses and a duplicate: 2 charged.
	r = batch(`"accepted_email@x.example","accepted_email@X.EXAMPLE","rejected_email@x.example"`)
	if r.status != http.StatusCreated {
		t.Fatalf("batch within the quota: %d %s", r.status, r.body)
	}
	// Two more when one is left: refused whole.
	r = batch(`"a@x.example","b@x.example"`)
	if r.status != http.StatusTooManyRequests || r.errorCode(t) != "rate_limited" || r.header.Get("Retry-After") != "2678400" ||
		r.header.Get("Location") != "" || !strings.Contains(string(r.body), "address quota") {
		t.Fatalf("batch over the quota: %d %v %s", r.status, r.header, r.body)
	}
	if n := cs.creates.Load(); n != 1 {
		t.Fatalf("%d batches created, want the first only", n)
	}
	// Nothing was charged for it: the last address is still there.
	if r := verify(h.testKey, ""); r.status != http.StatusOK {
		t.Fatalf("the address left: %d %s", r.status, r.body)
	}
	if r := verify(h.testKey, ""); r.status != http.StatusTooManyRequests {
		t.Fatalf("past the quota again: %d %s", r.status, r.body)
	}
}
