package server_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/server"
)

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
