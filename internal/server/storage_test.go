package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/server"
)

// The harness's clock starts at 2026-11-22T10:00Z and batches are kept 30
// days.
var (
	harnessStart = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	retention    = 30 * 24 * time.Hour
)

// emails is a JSON list of n distinct addresses, or of duplicates of one.
func emails(n int, distinct bool) string {
	list := make([]string, n)
	for i := range list {
		if distinct {
			list[i] = fmt.Sprintf(`"user%d@x.example"`, i)
		} else {
			list[i] = `"same@x.example"`
		}
	}
	return strings.Join(list, ",")
}

// The stored-address limit through HTTP (EVS_MAX_STORED_ADDRESSES=5), for
// a test-mode account (the cheap way to fill a disk) and a live one: a
// batch, from a body or an upload, that would take the account past 5
// stored addresses (counted with duplicates: counters.total) is 429
// rate_limited naming the limit, with
// Retry-After until the oldest batch expires (at most a day); nothing is
// created or charged to the address quota, and the refusal is not kept
// under its Idempotency-Key; other accounts are not concerned; once the
// oldest batch expires the same call passes.
func TestStoredAddressLimit(t *testing.T) {
	for _, mode := range []string{"test mode", "live"} {
		t.Run(mode, func(t *testing.T) {
			h := start(t, options{server: func(o *server.Options) {
				o.Config.MaxStoredAddresses = 5
				o.Config.QuotaAddresses, o.Config.QuotaPeriod = 8, "month"
			}})
			key, acct := h.testKey, h.testAcct
			if mode == "live" {
				key, acct = h.liveKey, h.liveAcct
			}
			batch := func(key, idem, list string) reply {
				t.Helper()
				r := req{method: http.MethodPost, path: "/v1/requests", key: key, body: `{"emails":[` + list + `],"mode":"quick"}`}
				if idem != "" {
					r.headers = map[string]string{"Idempotency-Key": idem}
				}
				return h.do(r)
			}
			stored := func() int {
				t.Helper()
				n, err := h.st.StoredAddresses(context.Background(), acct)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			refused := func(r reply, retry time.Duration) {
				t.Helper()
				if r.status != http.StatusTooManyRequests || r.errorCode(t) != "rate_limited" ||
					r.header.Get("Retry-After") != strconv.Itoa(int(retry.Seconds())) || r.header.Get("Location") != "" ||
					!strings.Contains(string(r.body), "stored-address limit (5 addresses") {
					t.Fatalf("over the stored-address limit: %d %v %s; want 429, Retry-After %v", r.status, r.header, r.body, retry)
				}
			}

			// Three addresses, one a duplicate: 3 stored, 2 charged.
			if r := batch(key, "", `"a@x.example","a@X.EXAMPLE","b@x.example"`); r.status != http.StatusCreated {
				t.Fatalf("first batch: %d %s", r.status, r.body)
			}
			// Three more when two are left: refused until the first batch
			// expires in 30 days, which a day's Retry-After bounds.
			refused(batch(key, "second", emails(3, true)), 24*time.Hour)
			if n := stored(); n != 3 {
				t.Fatalf("stored %d after a refusal, want 3", n)
			}
			// The same from an upload: 3 are refused, 2 fit.
			for _, c := range []struct{ n, status int }{{3, http.StatusTooManyRequests}, {2, http.StatusCreated}} {
				id, putURL := h.newUpload(key, "text/csv")
				csv := "email\n" + strings.ReplaceAll(strings.ReplaceAll(emails(c.n, true), `"`, ""), ",", "\n") + "\n"
				if r := h.put(putURL, "text/csv", strings.NewReader(csv)); r.status != http.StatusOK && r.status != http.StatusNoContent {
					t.Fatalf("PUT: %d %s", r.status, r.body)
				}
				r := h.do(req{method: http.MethodPost, path: "/v1/requests", key: key, body: `{"uploadId":"` + id + `","mode":"quick"}`})
				if c.status == http.StatusTooManyRequests {
					refused(r, 24*time.Hour)
				} else if r.status != c.status {
					t.Fatalf("upload of %d: %d %s", c.n, r.status, r.body)
				}
			}
			if n := stored(); n != 5 {
				t.Fatalf("stored %d, want 5", n)
			}
			// Another account stores its own 5.
			if r := batch(h.otherKey, "", emails(5, false)); r.status != http.StatusCreated {
				t.Fatalf("another account: %d %s", r.status, r.body)
			}
			// Nothing was charged for the refused batches: of the quota's
			// 8, 2 + 2 were charged and 4 are left.
			for i := range 5 {
				r := h.do(req{method: http.MethodPost, path: "/v1/verify", key: key, body: `{"email":"accepted_email@x.example","mode":"quick"}`})
				if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[i < 4]; r.status != want {
					t.Fatalf("verify %d: %d %s, want %d", i+1, r.status, r.body, want)
				}
			}
			// 12 hours before the first batch expires, the wait is exact.
			expires := harnessStart.Add(retention)
			h.clock.Set(expires.Add(-12 * time.Hour))
			refused(batch(key, "second", emails(3, true)), 12*time.Hour)
			// Expired (a new month too): the same call, same key, passes.
			h.clock.Set(expires)
			if r := batch(key, "second", emails(3, true)); r.status != http.StatusCreated {
				t.Fatalf("after the first batch expired: %d %s", r.status, r.body)
			}
			if n := stored(); n != 3 {
				t.Fatalf("stored %d, want the new batch's 3", n)
			}
		})
	}
}

// Concurrent creations never take an account past its stored-address
// limit: with room for 3 batches of 3, exactly 3 of 12 pass.
func TestStoredAddressLimitConcurrent(t *testing.T) {
	h := start(t, options{server: func(o *server.Options) { o.Config.MaxStoredAddresses = 10 }})
	const callers = 12
	statuses := make([]int, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = h.do(req{method: http.MethodPost, path: "/v1/requests", key: h.testKey, body: `{"emails":[` + emails(3, true) + `],"mode":"quick"}`}).status
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	if count[http.StatusCreated] != 3 || count[http.StatusTooManyRequests] != callers-3 {
		t.Fatalf("replies %v, want 3 × 201 and %d × 429", count, callers-3)
	}
	if n, err := h.st.StoredAddresses(context.Background(), h.testAcct); err != nil || n != 9 {
		t.Fatalf("stored %d, %v; want 9", n, err)
	}
}

// The Idempotency-Key limit through HTTP (EVS_MAX_IDEMPOTENCY_KEYS=3): per
// account and UTC day, the fourth new key is 429 rate_limited naming the
// limit, with Retry-After to midnight, on any route; replays of the keys
// already used, calls without a key and other accounts go on; a refused
// key is not counted, and the next day has 3 new keys again.
func TestIdempotencyKeyLimit(t *testing.T) {
	h := start(t, options{server: func(o *server.Options) { o.Config.MaxIdempotencyKeys = 3 }})
	call := func(route, key, idem string) reply {
		t.Helper()
		r := req{method: http.MethodPost, path: "/v1/verify", key: key, body: `{"email":"accepted_email@x.example","mode":"quick"}`}
		if route == "requests" {
			r.path, r.body = "/v1/requests", `{"emails":["accepted_email@x.example"],"mode":"quick"}`
		}
		if idem != "" {
			r.headers = map[string]string{"Idempotency-Key": idem}
		}
		return h.do(r)
	}
	ok := func(r reply) bool { return r.status == http.StatusOK || r.status == http.StatusCreated }
	steps := []struct {
		name     string
		at       time.Time
		route    string
		other    bool // the other account's key
		idem     string
		retry    time.Duration // 0: passes
		replayed bool
	}{
		{name: "first key", route: "verify", idem: "k1"},
		{name: "second key", route: "requests", idem: "k2"},
		{name: "third key", route: "verify", idem: "k3"},
		// 2026-11-22T10:00Z: 14 hours to the day's end.
		{name: "fourth key", route: "verify", idem: "k4", retry: 14 * time.Hour},
		{name: "fourth key, batch", route: "requests", idem: "k4", retry: 14 * time.Hour},
		{name: "replay", route: "verify", idem: "k1", replayed: true},
		{name: "replay of a batch", route: "requests", idem: "k2", replayed: true},
		{name: "no key", route: "verify"},
		{name: "no key, batch", route: "requests"},
		{name: "other account", route: "verify", other: true, idem: "k4"},
		{name: "late in the day", at: time.Date(2026, 11, 22, 23, 59, 0, 0, time.UTC), route: "verify", idem: "k5", retry: time.Minute},
		// The refused keys took nothing: the next day has 3.
		{name: "next day", at: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), route: "verify", idem: "k4"},
		{name: "next day, second", route: "requests", idem: "k5"},
		{name: "next day, third", route: "verify", idem: "k6"},
		{name: "next day, fourth", route: "verify", idem: "k7", retry: 24 * time.Hour},
	}
	for _, s := range steps {
		if !s.at.IsZero() {
			h.clock.Set(s.at)
		}
		key := h.testKey
		if s.other {
			key = h.otherKey
		}
		r := call(s.route, key, s.idem)
		replayed := r.header.Get("Idempotent-Replayed") == "true"
		switch {
		case s.retry == 0 && (!ok(r) || replayed != s.replayed):
			t.Fatalf("%s: %d %v %s; want success, replayed %v", s.name, r.status, r.header, r.body, s.replayed)
		case s.retry != 0 && (r.status != http.StatusTooManyRequests || r.errorCode(t) != "rate_limited" ||
			r.header.Get("Retry-After") != strconv.Itoa(int(s.retry.Seconds())) || replayed ||
			!strings.Contains(string(r.body), "Idempotency-Key limit (3 new keys a day")):
			t.Fatalf("%s: %d %v %s; want 429 with Retry-After %v", s.name, r.status, r.header, r.body, s.retry)
		}
	}
}
