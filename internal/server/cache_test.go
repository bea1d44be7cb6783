package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/store"
)

// cacheCounts records evs_cache_requests_total's increments.
type cacheCounts struct {
	app.Nop
	mu sync.Mutex
	n  map[string]int
}

func (c *cacheCounts) CacheRequest(result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[result]++
}

func (c *cacheCounts) get(result string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[result]
}

// cacheRcpt accepts ok* addresses, greylists grey* ones, accepts every
// address of catchall.example (so it is accept-all: risky) and rejects the
// rest.
func cacheRcpt(addr string) string {
	switch {
	case strings.HasSuffix(addr, "@catchall.example"), strings.HasPrefix(addr, "ok"):
		return "250 2.1.5 OK"
	case strings.HasPrefix(addr, "grey"):
		return "450 4.2.0 Greylisted, try again later"
	}
	return "550 5.1.1 <" + addr + ">: User unknown"
}

// startCached starts a server whose result cache keeps verdicts for ttl.
func startCached(t *testing.T, ttl time.Duration) (*harness, *cacheCounts) {
	t.Helper()
	counts := &cacheCounts{n: map[string]int{}}
	h := start(t, options{rcpt: cacheRcpt, server: func(o *server.Options) {
		o.Config.CacheTTL = ttl
		o.Metrics = counts
	}})
	h.dns.AddRecord("catchall.example. 300 IN MX 10 mx1.good.example.")
	return h, counts
}

// verifyAddr calls POST /v1/verify and returns the reply's body.
func (h *harness) verifyAddr(key, email, extra string) []byte {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/v1/verify", key: key, body: `{"email":"` + email + `","mode":"full"` + extra + `}`})
	if r.status != 200 {
		h.t.Fatalf("verify %s: %d %s", email, r.status, r.body)
	}
	return r.body
}

// decisionOf returns a verify reply's decision object.
func decisionOf(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	d, _ := m["decision"].(map[string]any)
	if d == nil {
		t.Fatalf("no decision: %s", body)
	}
	return d
}

// withoutVolatile is a reply without the fields a reuse may change:
// requestId, decision.cached and decision.durationMs, re-encoded.
func withoutVolatile(t *testing.T, body []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "requestId")
	if d, ok := m["decision"].(map[string]any); ok {
		delete(d, "cached")
		delete(d, "durationMs")
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCacheReverifyOpensNoConnection: re-verifying 1,000 live addresses
// within the TTL opens no SMTP connection, and each reply is the first
// one's but for requestId, cached and durationMs.
func TestCacheReverifyOpensNoConnection(t *testing.T) {
	t.Parallel() // long, on a harness of its own: it runs beside the others so marked
	h, counts := startCached(t, 24*time.Hour)
	var emails []string
	for i := 0; i < 1000; i++ {
		if i%2 == 0 {
			emails = append(emails, fmt.Sprintf("ok%d@good.example", i))
		} else {
			emails = append(emails, fmt.Sprintf("No%d@Other.Example", i))
		}
	}
	first := make([][]byte, len(emails))
	for i, e := range emails {
		first[i] = h.verifyAddr(h.liveKey, e, "")
		if decisionOf(t, first[i])["cached"] != false {
			t.Fatalf("first verification says cached: %s", first[i])
		}
	}
	conns := h.smtp.Connections()
	if conns == 0 {
		t.Fatal("the first pass opened no SMTP connection")
	}
	h.clock.Advance(23 * time.Hour)
	for i, e := range emails {
		again := h.verifyAddr(h.liveKey, e, "")
		if d := decisionOf(t, again); d["cached"] != true {
			t.Fatalf("%s not reused: %s", e, again)
		}
		if a, b := withoutVolatile(t, first[i]), withoutVolatile(t, again); !bytes.Equal(a, b) {
			t.Fatalf("reused reply differs:\nfirst %s\nagain %s", a, b)
		}
	}
	if got := h.smtp.Connections(); got != conns {
		t.Fatalf("re-verifying opened %d SMTP connections, want 0", got-conns)
	}
	if got := counts.get("hit"); got != len(emails) {
		t.Fatalf("cache hits counted %d, want %d", got, len(emails))
	}
}

// TestCacheFreshness: what a lookup reuses, by verdict, age and maxAge.
func TestCacheFreshness(t *testing.T) {
	t.Parallel() // long, on a harness of its own: it runs beside the others so marked
	tests := []struct {
		name   string
		email  string
		status string
		after  time.Duration
		maxAge string
		reused bool
		result string // the lookup's metric label
	}{
		{"deliverable within the TTL", "ok1@good.example", "deliverable", 23 * time.Hour, "", true, "hit"},
		{"deliverable past the TTL", "ok1@good.example", "deliverable", 25 * time.Hour, "", false, "stale"},
		{"undeliverable within the TTL", "no1@good.example", "undeliverable", time.Hour, "", true, "hit"},
		{"maxAge 0 never reads", "ok1@good.example", "deliverable", time.Minute, `,"maxAge":0`, false, "miss"},
		{"younger than maxAge", "ok1@good.example", "deliverable", 30 * time.Minute, `,"maxAge":3600`, true, "hit"},
		{"older than maxAge", "ok1@good.example", "deliverable", 2 * time.Hour, `,"maxAge":3600`, false, "stale"},
		{"risky within an hour", "x@catchall.example", "risky", 59 * time.Minute, "", true, "hit"},
		{"risky after an hour", "x@catchall.example", "risky", 61 * time.Minute, "", false, "stale"},
		{"unknown never kept", "grey1@good.example", "unknown", time.Minute, "", false, "miss"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, counts := startCached(t, 24*time.Hour)
			first := decisionOf(t, h.verifyAddr(h.liveKey, tt.email, ""))
			h.clock.Advance(tt.after)
			conns := h.smtp.Connections()
			before := counts.get(tt.result)
			body := h.verifyAddr(h.liveKey, tt.email, tt.maxAge)
			d := decisionOf(t, body)
			var top map[string]any
			_ = json.Unmarshal(body, &top)
			if top["status"] != tt.status {
				t.Fatalf("status %v, want %s: %s", top["status"], tt.status, body)
			}
			if d["cached"] != tt.reused {
				t.Fatalf("cached = %v, want %v: %s", d["cached"], tt.reused, body)
			}
			probed := h.smtp.Connections() > conns
			if probed == tt.reused {
				t.Fatalf("reused %v but SMTP connections went from %d to %d", tt.reused, conns, h.smtp.Connections())
			}
			if tt.reused && (d["checkedAt"] != first["checkedAt"] || d["score"] != first["score"]) {
				t.Fatalf("reused verdict's checkedAt/score %v/%v, first %v/%v", d["checkedAt"], d["score"], first["checkedAt"], first["score"])
			}
			if !tt.reused && d["checkedAt"] == first["checkedAt"] {
				t.Fatalf("a new verdict kept the old checkedAt %v", d["checkedAt"])
			}
			if got := counts.get(tt.result) - before; got != 1 {
				t.Fatalf("%s counted %d times, want 1", tt.result, got)
			}
		})
	}
}

// TestCacheMaxAgeInvalid: maxAge is an integer of seconds, 0 or more.
func TestCacheMaxAgeInvalid(t *testing.T) {
	h, _ := startCached(t, 24*time.Hour)
	for _, v := range []string{`-1`, `1.5`, `"60"`, `1e3`, `true`, `[]`, `{}`} {
		for _, r := range []reply{
			h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"ok1@good.example","maxAge":` + v + `}`}),
			h.do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":["ok1@good.example"],"maxAge":` + v + `}`}),
		} {
			if r.status != 400 || r.errorCode(t) != "invalid_request" {
				t.Fatalf("maxAge %s: %d %s", v, r.status, r.body)
			}
		}
	}
	for _, v := range []string{"-1", "1.5", "", "x"} {
		r := h.do(req{method: "POST", path: "/v1/requests?maxAge=" + v, key: h.liveKey, body: "ok1@good.example\n", headers: map[string]string{"Content-Type": "text/csv"}})
		if r.status != 400 || r.errorCode(t) != "invalid_request" {
			t.Fatalf("CSV maxAge %q: %d %s", v, r.status, r.body)
		}
	}
}

// TestCacheIsPerAccount: another account's identical call is verified
// afresh, and it leaves the first account's entry as it was.
func TestCacheIsPerAccount(t *testing.T) {
	h, _ := startCached(t, 24*time.Hour)
	_, otherLive := h.account("other-live", false)
	h.verifyAddr(h.liveKey, "ok1@good.example", "")
	conns := h.smtp.Connections()
	if d := decisionOf(t, h.verifyAddr(otherLive, "ok1@good.example", "")); d["cached"] != false {
		t.Fatalf("another account got the first one's verdict: %v", d)
	}
	if h.smtp.Connections() == conns {
		t.Fatal("another account's call opened no SMTP connection")
	}
	if d := decisionOf(t, h.verifyAddr(h.liveKey, "ok1@good.example", "")); d["cached"] != true {
		t.Fatalf("the first account lost its entry: %v", d)
	}
}

// TestCacheTestModeUntouched: test mode neither writes the cache nor reads
// an entry that is there.
func TestCacheTestModeUntouched(t *testing.T) {
	h, counts := startCached(t, 24*time.Hour)
	ctx := context.Background()
	h.verifyAddr(h.testKey, "user@good.example", "")
	if _, _, found, err := h.st.CachedDecision(ctx, h.testAcct, evs.ModeFull, "user@good.example"); err != nil || found {
		t.Fatalf("test mode wrote the cache: found %v, %v", found, err)
	}
	planted := evs.Decision{Email: "user@example.com", Normalized: "user@example.com", Reason: evs.Reason("rejected_email"), Mode: evs.ModeFull, CheckedAt: evs.Time{Time: h.clock.Now()}}
	if err := h.st.KeepDecisions(ctx, h.testAcct, []store.CacheEntry{{Decision: planted, ExpiresAt: h.clock.Now().Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if d := decisionOf(t, h.verifyAddr(h.testKey, "user@example.com", "")); d["cached"] != false || d["reason"] == "rejected_email" {
		t.Fatalf("test mode read the cache: %v", d)
	}
	if n := counts.get("hit") + counts.get("miss") + counts.get("stale"); n != 0 {
		t.Fatalf("test mode looked up the cache %d times", n)
	}
}

// TestCacheBatchMaxAgeOlderThanVerdicts: a batch whose maxAge is younger
// than the account's verdicts (2 h old, within the TTL) reuses none of
// them and probes again. This needs the clock to move, which only this
// deployment's harness does; the rest of a batch's reuse (no connection
// within the TTL, the same results marked cached, /v1/verify reusing a
// batch's verdict, maxAge 0, a maxAge older than the verdicts) is the
// behaviour suite's, on both deployments (internal/app,
// TestSuiteCacheReuse).
func TestCacheBatchMaxAgeOlderThanVerdicts(t *testing.T) {
	h, _ := startCached(t, 24*time.Hour)
	var emails []string
	for i := 0; i < 50; i++ {
		emails = append(emails, fmt.Sprintf("ok%d@good.example", i), fmt.Sprintf("no%d@other.example", i))
	}
	h.fullBatch(h.liveKey, emails, "", time.Minute)
	h.clock.Advance(2 * time.Hour) // older than 3600 s, within the TTL
	before := h.smtp.Connections()
	for e, d := range h.fullBatch(h.liveKey, emails, `,"maxAge":3600`, time.Minute) {
		if d["cached"] != false {
			t.Fatalf("maxAge 3600: %s reused %v", e, d)
		}
	}
	if h.smtp.Connections() == before {
		t.Fatal("maxAge 3600: the batch opened no SMTP connection")
	}
}

// fullBatch runs a full-mode batch of emails (extra: more fields of the
// request) to completion within limit and returns its decisions by
// address.
func (h *harness) fullBatch(key string, emails []string, extra string, limit time.Duration) map[string]map[string]any {
	t := h.t
	t.Helper()
	r := h.do(req{method: "POST", path: "/v1/requests", key: key, body: `{"emails":` + emailsJSON(emails) + `,"mode":"full"` + extra + `}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID
	if e := h.poll(key, id, limit); e.Request.State != "completed" {
		t.Fatalf("batch: %+v", e)
	}
	got := map[string]map[string]any{}
	cursor := ""
	for {
		p := h.do(req{path: "/v1/requests/" + id + "/results?limit=1000" + cursor, key: key})
		var page struct {
			Results []struct {
				Email    string         `json:"email"`
				Decision map[string]any `json:"decision"`
			} `json:"results"`
			NextCursor *string `json:"nextCursor"`
		}
		if err := json.Unmarshal(p.body, &page); err != nil || p.status != 200 {
			t.Fatalf("results: %d %s", p.status, p.body)
		}
		for _, res := range page.Results {
			got[res.Email] = res.Decision
		}
		if page.NextCursor == nil {
			return got
		}
		cursor = "&cursor=" + *page.NextCursor
	}
}
