package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestBadInput: every kind of bad input gets a clear error, in the
// envelope, with error.requestId equal to X-Request-Id, and changes nothing.
func TestBadInput(t *testing.T) {
	h := start(t, options{})
	otherBatch := h.seedBatch(h.otherAccount(), 1)
	revoked := h.revokedKey()
	cases := []struct {
		name   string
		req    req
		status int
		code   string
	}{
		{"malformed JSON", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":`}, 400, "invalid_request"},
		{"JSON not an object", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `["a@b.example"]`}, 400, "invalid_request"},
		{"JSON string", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `"a@b.example"`}, 400, "invalid_request"},
		{"JSON null", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `null`}, 400, "invalid_request"},
		{"unknown field", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@b.example","extra":1}`}, 400, "invalid_request"},
		{"email wrong type", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":42}`}, 400, "invalid_request"},
		{"mode wrong type", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@b.example","mode":1}`}, 400, "invalid_request"},
		{"mode unknown", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@b.example","mode":"deep"}`}, 400, "invalid_request"},
		{"email missing", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{}`}, 400, "invalid_request"},
		{"email empty", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":""}`}, 400, "invalid_request"},
		{"email 513 bytes", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"` + strings.Repeat("a", 500) + "@x.example.com" + `"}`}, 400, "invalid_request"},
		{"trailing data", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@b.example"} {}`}, 400, "invalid_request"},
		{"body over 8 KiB", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@b.example","mode":"quick"` + strings.Repeat(" ", 8200) + `}`}, 413, "payload_too_large"},
		{"no Content-Type", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@b.example"}`, headers: map[string]string{"Content-Type": "-"}}, 400, "invalid_request"},
		{"other Content-Type", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@b.example"}`, headers: map[string]string{"Content-Type": "text/plain"}}, 400, "invalid_request"},
		{"empty Idempotency-Key", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@b.example"}`, headers: map[string]string{"Idempotency-Key": ""}}, 400, "invalid_request"},
		{"256-char Idempotency-Key", req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@b.example"}`, headers: map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}}, 400, "invalid_request"},
		{"missing key", req{method: "POST", path: "/v1/verify", body: `{"email":"a@b.example"}`}, 401, "unauthorized"},
		{"malformed key", req{method: "POST", path: "/v1/verify", key: "evs.short", body: `{"email":"a@b.example"}`}, 401, "unauthorized"},
		{"wrong prefix key", req{method: "POST", path: "/v1/verify", key: "sk." + strings.Repeat("A", 43), body: `{"email":"a@b.example"}`}, 401, "unauthorized"},
		{"unknown key", req{method: "POST", path: "/v1/verify", key: "evs." + strings.Repeat("A", 43), body: `{"email":"a@b.example"}`}, 401, "unauthorized"},
		{"revoked key", req{method: "POST", path: "/v1/verify", key: revoked, body: `{"email":"a@b.example"}`}, 403, "forbidden"},
		{"non-UUID id", req{path: "/v1/requests/not-a-uuid", key: h.testKey}, 400, "invalid_request"},
		{"another account's batch", req{path: "/v1/requests/" + otherBatch, key: h.testKey}, 404, "not_found"},
		{"missing batch", req{path: "/v1/requests/7d444840-9dc0-11d1-b245-5ffdce74fad2", key: h.testKey}, 404, "not_found"},
		{"another account's results", req{path: "/v1/requests/" + otherBatch + "/results", key: h.testKey}, 404, "not_found"},
		{"cancel another account's batch", req{method: "POST", path: "/v1/requests/" + otherBatch + "/cancel", key: h.testKey}, 404, "not_found"},
		{"wrong method", req{method: "GET", path: "/v1/verify", key: h.testKey}, 405, "method_not_allowed"},
		{"wrong method on batch", req{method: "DELETE", path: "/v1/requests/" + otherBatch, key: h.testKey}, 405, "method_not_allowed"},
		{"unknown path", req{path: "/v1/nothing", key: h.testKey}, 404, "not_found"},
		{"unknown path without key", req{path: "/v2/verify"}, 404, "not_found"},
		{"batch empty list", req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":[]}`}, 400, "invalid_request"},
		{"batch not a list", req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":"a@b.example"}`}, 400, "invalid_request"},
		{"batch item not a string", req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":["a@b.example",3]}`}, 400, "invalid_request"},
		{"batch too many", req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":[` + strings.Repeat(`"a@b.example",`, 50000) + `"a@b.example"]}`}, 400, "invalid_request"},
		{"batch empty CSV", req{method: "POST", path: "/v1/requests", key: h.testKey, body: "email\n", headers: map[string]string{"Content-Type": "text/csv"}}, 400, "invalid_request"},
		{"results bad limit", req{path: "/v1/requests/" + otherBatch + "/results?limit=0", key: h.otherKey}, 400, "invalid_request"},
		{"results limit too big", req{path: "/v1/requests/" + otherBatch + "/results?limit=1001", key: h.otherKey}, 400, "invalid_request"},
		{"results bad cursor", req{path: "/v1/requests/" + otherBatch + "/results?cursor=xyz", key: h.otherKey}, 400, "invalid_request"},
		{"results bad status", req{path: "/v1/requests/" + otherBatch + "/results?status=maybe", key: h.otherKey}, 400, "invalid_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.do(c.req)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			if code := r.errorCode(t); code != c.code {
				t.Fatalf("code %q, want %q", code, c.code)
			}
			if c.req.key != "" && strings.Contains(string(r.body), c.req.key) {
				t.Fatal("the reply echoes the API key")
			}
		})
	}
	// A key sent the way other APIs take theirs is refused with a message
	// that names the header it belongs in, and is not echoed.
	r := h.do(req{method: "POST", path: "/v1/verify", body: `{"email":"a@b.example"}`, headers: map[string]string{"Authorization": "Bearer " + h.testKey}})
	if msg, _ := r.json(t)["error"].(map[string]any)["message"].(string); r.status != 401 || !strings.Contains(msg, "X-Api-Key") || strings.Contains(string(r.body), h.testKey) {
		t.Errorf("Authorization: Bearer: %d %s; want 401 naming X-Api-Key", r.status, r.body)
	}
	// Nothing changed: no batch was created by any of the bad calls.
	bs, err := h.st.UnfinishedBatches(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if b.AccountID == h.testAcct {
			t.Fatalf("a bad request created batch %s", b.ID)
		}
	}
}

// TestVerifyLive runs the live engine through HTTP against loopback DNS and
// SMTP peers.
func TestVerifyLive(t *testing.T) {
	h := start(t, options{})
	cases := []struct {
		email, mode, status, reason, smtp string
	}{
		{"alice@good.example", "full", "deliverable", "accepted_email", "accepted"},
		{"Alice@GOOD.example", "full", "undeliverable", "rejected_email", "rejected"}, // local part is case-sensitive at the server
		{"nobody@good.example", "full", "undeliverable", "rejected_email", "rejected"},
		{"alice@good.example", "quick", "unknown", "mailbox_not_checked", "skipped"},
		{"alice@missing.example", "full", "undeliverable", "invalid_domain", "skipped"},
		{"not an address", "full", "undeliverable", "invalid_syntax", "skipped"},
	}
	for _, c := range cases {
		t.Run(c.email+"/"+c.mode, func(t *testing.T) {
			r := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: fmt.Sprintf(`{"email":%q,"mode":%q}`, c.email, c.mode)})
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			m := r.json(t)
			d := m["decision"].(map[string]any)
			smtp := d["checks"].(map[string]any)["smtp"].(map[string]any)
			if m["status"] != c.status || d["reason"] != c.reason || smtp["result"] != c.smtp {
				t.Fatalf("got %v/%v/%v, want %s/%s/%s: %s", m["status"], d["reason"], smtp["result"], c.status, c.reason, c.smtp, r.body)
			}
			if m["requestId"] != r.header.Get("X-Request-Id") {
				t.Fatal("requestId differs from X-Request-Id")
			}
			if _, ok := d["testMode"]; ok {
				t.Fatal("a live decision is marked testMode")
			}
		})
	}
}

// TestVerifySandbox: a test-mode account reaches every reason, in both
// modes, without the network.
func TestVerifySandbox(t *testing.T) {
	h := start(t, options{})
	reasons := map[string]string{
		"accepted_email": "deliverable", "invalid_domain": "undeliverable", "no_mail_server": "undeliverable",
		"rejected_email": "undeliverable", "accept_all": "risky", "mailbox_full": "risky", "disposable": "risky",
		"greylisted": "unknown", "smtp_unreachable": "unknown", "dns_error": "unknown", "timeout": "unknown",
		"mailbox_not_checked": "unknown",
	}
	for _, mode := range []string{"full", "quick"} {
		for reason, status := range reasons {
			for _, local := range []string{reason, "team+" + strings.ReplaceAll(reason, "_", "-")} {
				r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: fmt.Sprintf(`{"email":"%s@x.example","mode":%q}`, local, mode)})
				m := r.json(t)
				d := m["decision"].(map[string]any)
				if r.status != 200 || m["status"] != status || d["reason"] != reason || d["testMode"] != true {
					t.Errorf("%s/%s: %d %v %v testMode=%v", local, mode, r.status, m["status"], d["reason"], d["testMode"])
				}
			}
		}
	}
	r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"plain@gmial.com"}`})
	d := r.json(t)["decision"].(map[string]any)
	if d["reason"] != "accepted_email" || d["suggestion"] != "plain@gmail.com" {
		t.Errorf("plain sandbox address: %s", r.body)
	}
	r = h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a..b@x.example"}`})
	if d := r.json(t)["decision"].(map[string]any); d["reason"] != "invalid_syntax" {
		t.Errorf("invalid sandbox address: %s", r.body)
	}
}

func TestIdempotency(t *testing.T) {
	h := start(t, options{})
	body := `{"email":"alice@good.example","mode":"full"}`
	first := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: body, headers: map[string]string{"Idempotency-Key": "k-1"}})
	if first.status != 200 || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first call: %d %v", first.status, first.header)
	}
	conns := h.smtp.Connections()
	// Same request with its keys in another order: same fingerprint.
	again := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"mode":"full", "email":"alice@good.example"}`, headers: map[string]string{"Idempotency-Key": "k-1"}})
	if again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d replayed=%q", again.status, again.header.Get("Idempotent-Replayed"))
	}
	if h.smtp.Connections() != conns {
		t.Fatal("the replay did the work again")
	}
	f, a := first.json(t), again.json(t)
	if a["requestId"] != again.header.Get("X-Request-Id") || a["requestId"] == f["requestId"] {
		t.Fatalf("replay requestId %v (first %v, header %q)", a["requestId"], f["requestId"], again.header.Get("X-Request-Id"))
	}
	if fmt.Sprint(f["decision"]) != fmt.Sprint(a["decision"]) {
		t.Fatal("replayed decision differs")
	}
	reused := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"bob@good.example"}`, headers: map[string]string{"Idempotency-Key": "k-1"}})
	if reused.status != 422 || reused.errorCode(t) != "idempotency_key_reused" {
		t.Fatalf("reuse: %d %s", reused.status, reused.body)
	}
	// The key is scoped per account: another account may use it.
	other := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: body, headers: map[string]string{"Idempotency-Key": "k-1"}})
	if other.status != 200 || other.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("other account: %d replayed=%q", other.status, other.header.Get("Idempotent-Replayed"))
	}
	// A stored 4xx... is not possible on verify (validation runs first),
	// so errors are never stored; after 24 h the key is free again.
	h.clock.Advance(24*time.Hour + time.Second)
	fresh := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"bob@good.example"}`, headers: map[string]string{"Idempotency-Key": "k-1"}})
	if fresh.status != 200 || fresh.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after 24 h: %d replayed=%q: %s", fresh.status, fresh.header.Get("Idempotent-Replayed"), fresh.body)
	}
}

// TestIdempotencyConcurrent fires one key from 50 goroutines at once: the
// work runs exactly once; every other reply is a replay or a 409.
func TestIdempotencyConcurrent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	// The work's RCPT for alice is held until every other call has its
	// reply: the first call stays in progress throughout.
	release := make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo)
	h := start(t, options{replyTimeout: time.Minute, rcpt: func(addr string) string {
		mu.Lock()
		alice := strings.HasPrefix(addr, "alice@")
		if alice {
			calls++
		}
		mu.Unlock()
		if alice {
			<-release
		}
		return "250 2.1.5 OK"
	}})
	var wg sync.WaitGroup
	replies := make([]reply, 50)
	answered := make(chan struct{}, len(replies))
	startGate := make(chan struct{})
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			replies[i] = h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"alice@good.example"}`, headers: map[string]string{"Idempotency-Key": "burst"}})
			answered <- struct{}{}
		}()
	}
	close(startGate)
	for n := 1; n < len(replies); n++ {
		testkit.Receive(t, answered, 20*time.Second, fmt.Sprintf("reply %d of the %d calls beside the one at work", n, len(replies)-1))
	}
	letGo()
	wg.Wait()
	fresh, replayed, inProgress := 0, 0, 0
	for _, r := range replies {
		switch {
		case r.status == 200 && r.header.Get("Idempotent-Replayed") == "true":
			replayed++
		case r.status == 200:
			fresh++
		case r.status == 409 && r.errorCode(t) == "idempotency_in_progress":
			inProgress++
		default:
			t.Errorf("unexpected reply %d: %s", r.status, r.body)
		}
	}
	if fresh != 1 || calls != 1 {
		t.Fatalf("%d fresh replies and %d RCPTs for alice, want exactly 1 (replayed %d, in progress %d)", fresh, calls, replayed, inProgress)
	}
	t.Logf("50 concurrent calls: 1 executed, %d replayed, %d in progress", replayed, inProgress)
}

// TestIdempotencyMode: on the store of the serving process (OpenServing, as
// evs serve opens it) an idempotent call is claimed in memory and writes
// only its finished reply, so a crash mid-call leaves nothing that blocks
// the key; on a store that cannot vouch for exclusivity (here wrapped, so
// it hides Exclusive) the claim is written to the store, safe for several
// processes. Either way a repeat while the call runs gets 409.
func TestIdempotencyMode(t *testing.T) {
	tests := []struct {
		name string
		wrap func(server.Store) server.Store
		// wantHeld is the state of the key's record while the call runs
		// ("" for none).
		wantHeld string
	}{
		{"serving store: claim in memory", nil, ""},
		{"other store: claim in the store", func(s server.Store) server.Store { return struct{ server.Store }{s} }, idempotency.InProgress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held, release := make(chan struct{}), make(chan struct{})
			var heldOnce, releaseOnce sync.Once
			free := func() { releaseOnce.Do(func() { close(release) }) }
			h := start(t, options{wrapStore: tt.wrap, rcpt: func(addr string) string {
				if strings.HasPrefix(addr, "alice@") {
					heldOnce.Do(func() { close(held) })
					<-release
					return "250 2.1.5 OK"
				}
				return "550 5.1.1 user unknown"
			}})
			t.Cleanup(free) // before the server's own cleanup waits for the call
			call := func() reply {
				return h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"alice@good.example","mode":"full"}`,
					headers: map[string]string{"Idempotency-Key": "k-held"}})
			}
			first := make(chan reply, 1)
			go func() { first <- call() }()
			select {
			case <-held:
			case <-time.After(15 * time.Second):
				t.Fatal("the call never reached the SMTP server")
			}
			scope := idempotency.Scope(h.liveAcct, "POST", "/v1/verify", "k-held")
			rec, found, err := h.st.LookupIdempotency(context.Background(), scope, h.clock.Now())
			if err != nil || found != (tt.wantHeld != "") || rec.State != tt.wantHeld {
				t.Fatalf("while the call runs the store holds %+v (found=%v, err=%v); want state %q", rec, found, err, tt.wantHeld)
			}
			if r := call(); r.status != 409 || r.errorCode(t) != "idempotency_in_progress" {
				t.Fatalf("repeat while the call runs: %d %s", r.status, r.body)
			}
			free()
			if r := <-first; r.status != 200 {
				t.Fatalf("first call: %d %s", r.status, r.body)
			}
			rec, found, err = h.st.LookupIdempotency(context.Background(), scope, h.clock.Now())
			if err != nil || !found || rec.State != idempotency.Done || rec.StatusCode != 200 {
				t.Fatalf("after the call the store holds %+v (found=%v, err=%v); want its reply", rec, found, err)
			}
			if r := call(); r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("repeat after the call: %d replayed=%q", r.status, r.header.Get("Idempotent-Replayed"))
			}
		})
	}
}

// TestRevocationAtOnce: a key revoked while the server runs is refused at
// its next call, although the gateway caches the authorizer's answers for
// 300 s: whether revoked by another process (a second store handle, as
// `evs keys revoke` opens) or through the server's own store.
func TestRevocationAtOnce(t *testing.T) {
	h := start(t, options{})
	call := func(key string) int {
		return h.do(req{method: "POST", path: "/v1/verify", key: key, body: `{"email":"a@x.example","mode":"quick"}`}).status
	}
	_, elsewhere := h.account("elsewhere", true)
	_, here := h.account("here", true)
	for _, key := range []string{elsewhere, here, elsewhere, here} { // the second round from the cache
		if s := call(key); s != 200 {
			t.Fatalf("fresh key: %d", s)
		}
	}
	other, err := sqlitestore.Open(context.Background(), h.dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.RevokeKey(context.Background(), authorizer.HashKey(elsewhere), time.Now()); err != nil {
		t.Fatal(err)
	}
	if s := call(elsewhere); s != 403 {
		t.Fatalf("key revoked by another process: %d, want 403 at once", s)
	}
	if s := call(here); s != 200 {
		t.Fatalf("a key not revoked: %d", s)
	}
	if _, err := h.st.RevokeKey(context.Background(), authorizer.HashKey(here), h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if s := call(here); s != 403 {
		t.Fatalf("key revoked through the server's store: %d, want 403 at once", s)
	}
}

func TestRateLimit(t *testing.T) {
	h := start(t, options{rateLimit: 2})
	var limited reply
	ok := 0
	for i := 0; i < 10; i++ {
		r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@x.example","mode":"quick"}`})
		if r.status == 429 {
			limited = r
			break
		}
		ok++
	}
	if ok != 4 {
		t.Fatalf("%d calls passed before the limit, want the burst of 4", ok)
	}
	if limited.errorCode(t) != "rate_limited" || limited.header.Get("Retry-After") == "" {
		t.Fatalf("429 without rate_limited/Retry-After: %v %s", limited.header, limited.body)
	}
	// The limit is per account: a second key of the same account shares
	// the exhausted bucket.
	_, second := h.account("sandbox", true)
	if r := h.do(req{method: "POST", path: "/v1/verify", key: second, body: `{"email":"a@x.example","mode":"quick"}`}); r.status != 429 {
		t.Fatalf("a second key of the throttled account got %d, want 429", r.status)
	}
	// Another account has its own bucket.
	if r := h.do(req{method: "POST", path: "/v1/verify", key: h.otherKey, body: `{"email":"a@x.example","mode":"quick"}`}); r.status != 200 {
		t.Fatalf("other account throttled: %d", r.status)
	}
	h.clock.Advance(time.Second)
	if r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"a@x.example","mode":"quick"}`}); r.status != 200 {
		t.Fatalf("after a second: %d", r.status)
	}
}

// seedBatch stores a batch with n addresses directly, for tests that need
// one of another account.
func (h *harness) seedBatch(accountID string, n int) string {
	h.t.Helper()
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", time.Now().UnixNano()%1e12)
	items := make([]evs.Item, n)
	for i := range items {
		items[i] = evs.Item{Seq: i, Email: fmt.Sprintf("u%d@x.example", i), Domain: "x.example"}
	}
	b := evs.Batch{ID: id, AccountID: accountID, Mode: "quick", State: evs.StateCancelled, CreatedAt: h.clock.Now(), ExpiresAt: h.clock.Now().Add(24 * time.Hour), Counters: evs.Counters{Total: n}}
	if err := h.st.CreateBatch(context.Background(), b, items); err != nil {
		h.t.Fatal(err)
	}
	return id
}

func (h *harness) otherAccount() string {
	a, err := h.st.AccountByName(context.Background(), "other")
	if err != nil {
		h.t.Fatal(err)
	}
	return a.ID
}

func (h *harness) revokedKey() string {
	_, key := h.account("revoked", true)
	if _, err := h.st.RevokeKey(context.Background(), authorizer.HashKey(key), h.clock.Now()); err != nil {
		h.t.Fatal(err)
	}
	return key
}
