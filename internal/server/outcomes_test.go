package server_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/server"
)

// catchAll answers 250 to every recipient: every address of good.example
// and other.example is risky/accept_all.
func catchAll(string) string { return "250 2.1.5 OK" }

// verifyDecision verifies email for key and returns the reply's status and
// decision.
func (h *harness) verifyDecision(key, email string) (string, map[string]any) {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/v1/verify", key: key, body: `{"email":"` + email + `"}`})
	if r.status != 200 {
		h.t.Fatalf("verify %s: %d %s", email, r.status, r.body)
	}
	m := r.json(h.t)
	return m["status"].(string), m["decision"].(map[string]any)
}

// postOutcomes posts body (JSON unless contentType says otherwise) and
// returns the reply.
func (h *harness) postOutcomes(key, contentType, body string, headers map[string]string) reply {
	h.t.Helper()
	hs := map[string]string{"Content-Type": contentType}
	for k, v := range headers {
		hs[k] = v
	}
	return h.do(req{method: "POST", path: "/v1/outcomes", key: key, body: body, headers: hs})
}

func history(d map[string]any) map[string]any {
	h, _ := d["checks"].(map[string]any)["history"].(map[string]any)
	return h
}

func domainHistory(d map[string]any) map[string]any {
	h, _ := d["checks"].(map[string]any)["domainHistory"].(map[string]any)
	return h
}

// TestOutcomesChangeVerdicts (contract, section 18): on a catch-all
// domain, a hard bounce makes the next verdict undeliverable/known_bounce
// with its date and reply, until a later delivery; a delivery makes an
// accept-all address deliverable/accepted_email; soft bounces and
// complaints change nothing but are noted. The same from /v1/verify
// (answered from the cache too) and from a batch. Another account sees
// none of it, and no address reaches the log.
func TestOutcomesChangeVerdicts(t *testing.T) {
	h := start(t, options{rcpt: catchAll, server: func(o *server.Options) { o.Config.CacheTTL = 24 * time.Hour }})
	_, secondKey := h.account("second", false)
	status, d := h.verifyDecision(h.liveKey, "bob@good.example")
	if status != "risky" || d["reason"] != "accept_all" || history(d) != nil {
		t.Fatalf("before outcomes: %s %v history %v", status, d["reason"], history(d))
	}
	if _, ok := d["checks"].(map[string]any)["history"]; ok {
		t.Fatal("checks.history present without outcomes")
	}

	r := h.postOutcomes(h.liveKey, "application/json", `{"outcomes":[
		{"email":"bob@Good.Example","outcome":"bounced","bounceType":"hard","at":"2026-11-22T10:10:00Z","smtpReply":"550 5.1.1 user unknown"},
		{"email":"alice@good.example","outcome":"delivered","at":"2026-11-22T10:11:00+01:00"},
		{"email":"carol@good.example","outcome":"bounced","bounceType":"soft","at":"2026-11-22T10:12:00Z"},
		{"email":"carol@good.example","outcome":"complained","at":"2026-11-22T10:13:00Z","bounceType":null,"smtpReply":null},
		{"email":"dave@good.example","outcome":"deferred","at":"2026-11-22T10:14:00Z"}]}`, nil)
	if r.status != 200 {
		t.Fatalf("post outcomes: %d %s", r.status, r.body)
	}
	if m := r.json(t); m["received"] != 5.0 || m["accepted"] != 5.0 || m["duplicates"] != 0.0 {
		t.Fatalf("post outcomes: %s", r.body)
	}

	check := func(what string, status string, d map[string]any, wantStatus, wantReason, wantResult string, wantScore float64) {
		t.Helper()
		if status != wantStatus || d["reason"] != wantReason || d["score"] != wantScore {
			t.Errorf("%s: %s/%v score %v, want %s/%s score %v", what, status, d["reason"], d["score"], wantStatus, wantReason, wantScore)
		}
		hist := history(d)
		if hist == nil || hist["result"] != wantResult || hist["detail"] == "" {
			t.Errorf("%s: checks.history = %v, want result %s", what, hist, wantResult)
		}
	}
	status, d = h.verifyDecision(h.liveKey, "bob@good.example")
	check("bob, cached verdict", status, d, "undeliverable", "known_bounce", "known_bounce", 1)
	if d["cached"] != true {
		t.Errorf("bob's verdict was not reused from the cache: the bounce must apply to it too")
	}
	if hist := history(d); hist["at"] != "2026-11-22T10:10:00.000Z" || hist["smtpReply"] != "550 5.1.1 user unknown" || hist["bounceType"] != "hard" || hist["outcome"] != "bounced" {
		t.Errorf("bob's evidence: %v", hist)
	}
	status, d = h.verifyDecision(h.liveKey, "alice@good.example")
	check("alice", status, d, "deliverable", "accepted_email", "delivered", 95)
	if hist := history(d); hist["at"] != "2026-11-22T09:11:00.000Z" || !strings.HasPrefix(hist["detail"].(string), "delivered on 2026-11-22") {
		t.Errorf("alice's evidence: %v", hist)
	}
	// good.example now has one delivery and one hard bounce on record:
	// its other addresses score (10×0.60 + 1) / 12 = 58 (docs/score.md).
	status, d = h.verifyDecision(h.liveKey, "carol@good.example")
	check("carol (soft bounce, complaint)", status, d, "risky", "accept_all", "noted", 58)
	status, d = h.verifyDecision(h.liveKey, "dave@good.example")
	check("dave (deferred)", status, d, "risky", "accept_all", "noted", 58)
	if dh := domainHistory(d); dh == nil || dh["scope"] != "account" || dh["delivered"] != 1.0 || dh["hardBounces"] != 1.0 {
		t.Errorf("dave's domain evidence: %v", dh)
	}
	status, d = h.verifyDecision(h.liveKey, "erin@good.example")
	if status != "risky" || d["score"] != 58.0 || history(d) != nil || domainHistory(d) == nil {
		t.Errorf("erin, no outcomes of her own: %s score %v, history %v, domain %v", status, d["score"], history(d), domainHistory(d))
	}

	// Another account's verdicts do not see them.
	status, d = h.verifyDecision(secondKey, "bob@good.example")
	if status != "risky" || history(d) != nil || domainHistory(d) != nil || d["score"] != 60.0 {
		t.Errorf("another account got %s score %v with history %v, domain %v", status, d["score"], history(d), domainHistory(d))
	}

	// A batch applies the same rule.
	got := h.fullBatch(h.liveKey, []string{"bob@other.example", "bob@good.example", "alice@good.example", "carol@good.example"}, "", time.Minute)
	for email, want := range map[string][2]string{
		"bob@good.example":   {"known_bounce", "known_bounce"},
		"alice@good.example": {"accepted_email", "delivered"},
		"carol@good.example": {"accept_all", "noted"},
		"bob@other.example":  {"accept_all", ""},
	} {
		d := got[email]
		hist := history(d)
		if d["reason"] != want[0] || (want[1] == "" && hist != nil) || (want[1] != "" && (hist == nil || hist["result"] != want[1])) {
			t.Errorf("batch %s: %v history %v, want %s/%s", email, d["reason"], hist, want[0], want[1])
		}
	}
	// The domain's counts too, and the score they give, as on /v1/verify.
	if d := got["carol@good.example"]; d["score"] != 58.0 || domainHistory(d) == nil {
		t.Errorf("batch carol: score %v, domain %v", d["score"], domainHistory(d))
	}
	if d := got["bob@other.example"]; d["score"] != 60.0 || domainHistory(d) != nil {
		t.Errorf("batch bob@other.example: score %v, domain %v", d["score"], domainHistory(d))
	}

	// A later delivery undoes the bounce.
	r = h.postOutcomes(h.liveKey, "text/csv", "Email,Outcome,At\r\nbob@good.example,delivered,2026-11-22T10:20:00Z\r\n", nil)
	if r.status != 200 || r.json(t)["accepted"] != 1.0 {
		t.Fatalf("post CSV: %d %s", r.status, r.body)
	}
	status, d = h.verifyDecision(h.liveKey, "bob@good.example")
	check("bob after a later delivery", status, d, "deliverable", "accepted_email", "delivered", 95)

	// Deleting bob's outcomes gives back the verdict without them, byte
	// for byte as before: no history.
	r = h.do(req{method: "DELETE", path: "/v1/outcomes?email=" + url.QueryEscape("bob@GOOD.example"), key: h.liveKey})
	if r.status != 200 || r.json(t)["deleted"] != 2.0 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	status, d = h.verifyDecision(h.liveKey, "bob@good.example")
	if status != "risky" || history(d) != nil {
		t.Errorf("after delete: %s, history %v", status, history(d))
	}
	if r := h.do(req{method: "DELETE", path: "/v1/outcomes?email=alice@good.example", key: secondKey}); r.status != 200 || r.json(t)["deleted"] != 0.0 {
		t.Errorf("another account's delete: %d %s", r.status, r.body)
	}
	if _, d := h.verifyDecision(h.liveKey, "alice@good.example"); d["reason"] != "accepted_email" {
		t.Errorf("another account's delete touched alice: %v", d["reason"])
	}

	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(strings.ToLower(line), "@good.example") {
			t.Errorf("a log line holds an address: %s", line)
		}
	}
}

// TestOutcomesIdempotent: the natural key keeps an outcome once, within a
// request and across requests; an Idempotency-Key replays the first reply.
func TestOutcomesIdempotent(t *testing.T) {
	h := start(t, options{rcpt: catchAll})
	body := `{"outcomes":[{"email":"bob@good.example","outcome":"bounced","bounceType":"hard","at":"2026-11-20T10:00:00Z"},
		{"email":"bob@GOOD.example","outcome":"bounced","bounceType":"hard","at":"2026-11-20T11:00:00+01:00"},
		{"email":"bob@good.example","outcome":"bounced","bounceType":"hard","at":"2026-11-20T10:00:00.0001Z"},
		{"email":"bob@good.example","outcome":"delivered","at":"2026-11-20T10:00:00Z"}]}`
	r := h.postOutcomes(h.liveKey, "application/json", body, nil)
	if m := r.json(t); r.status != 200 || m["received"] != 4.0 || m["accepted"] != 2.0 || m["duplicates"] != 2.0 {
		t.Fatalf("first: %d %s (the same address, kind and millisecond thrice: one kept)", r.status, r.body)
	}
	r = h.postOutcomes(h.liveKey, "application/json", body, nil)
	if m := r.json(t); r.status != 200 || m["accepted"] != 0.0 || m["duplicates"] != 4.0 {
		t.Fatalf("again: %d %s", r.status, r.body)
	}
	key := map[string]string{"Idempotency-Key": "outcomes-1"}
	csv := "email,outcome,at,bounceType,smtpReply\nann@good.example,bounced,2026-11-21T00:00:00Z,soft,\"452 4.2.2 mailbox full, try later\"\n"
	first := h.postOutcomes(h.liveKey, "text/csv", csv, key)
	again := h.postOutcomes(h.liveKey, "text/csv", csv, key)
	if first.status != 200 || again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d, %d %q", first.status, again.status, again.header.Get("Idempotent-Replayed"))
	}
	if a, b := first.json(t), again.json(t); a["accepted"] != 1.0 || b["accepted"] != 1.0 || a["requestId"] == b["requestId"] {
		t.Errorf("replayed body %s, first %s", again.body, first.body)
	}
	if r := h.postOutcomes(h.liveKey, "text/csv", csv+"ann@good.example,delivered,2026-11-21T00:00:00Z,,\n", key); r.status != 422 || r.errorCode(t) != "idempotency_key_reused" {
		t.Errorf("the key with another body: %d %s", r.status, r.body)
	}
}

// TestOutcomesRefused: one bad outcome refuses the whole request, with the
// first bad one's position and field, and nothing of it is stored.
func TestOutcomesRefused(t *testing.T) {
	h := start(t, options{rcpt: catchAll})
	good := `{"email":"bob@good.example","outcome":"delivered","at":"2026-11-20T10:00:00Z"}`
	tests := []struct {
		name, ct, body, want string
	}{
		{"no outcomes field", "application/json", `{}`, `"outcomes" is required`},
		{"empty list", "application/json", `{"outcomes":[]}`, "no outcomes"},
		{"unknown field", "application/json", `{"outcomes":[{"email":"a@good.example","outcome":"delivered","at":"2026-11-20T10:00:00Z","x":1}]}`, "unknown field"},
		{"missing email", "application/json", `{"outcomes":[` + good + `,{"outcome":"delivered","at":"2026-11-20T10:00:00Z"}]}`, `outcomes[1]: field "email" is required`},
		{"invalid address", "application/json", `{"outcomes":[{"email":"not an address","outcome":"delivered","at":"2026-11-20T10:00:00Z"}]}`, `outcomes[0]: field "email" is not a valid address`},
		{"unknown outcome", "application/json", `{"outcomes":[` + good + `,` + good + `,{"email":"a@good.example","outcome":"opened","at":"2026-11-20T10:00:00Z"}]}`, `outcomes[2]: field "outcome"`},
		{"bad time", "application/json", `{"outcomes":[{"email":"a@good.example","outcome":"delivered","at":"yesterday"}]}`, `outcomes[0]: field "at" must be an RFC 3339`},
		{"time without zone", "application/json", `{"outcomes":[{"email":"a@good.example","outcome":"delivered","at":"2026-11-20T10:00:00"}]}`, `field "at"`},
		{"time in the future", "application/json", `{"outcomes":[{"email":"a@good.example","outcome":"delivered","at":"2026-11-23T10:00:00Z"}]}`, "future"},
		{"bounce type without a bounce", "application/json", `{"outcomes":[{"email":"a@good.example","outcome":"delivered","bounceType":"hard","at":"2026-11-20T10:00:00Z"}]}`, `"bounceType" is only for outcome "bounced"`},
		{"unknown bounce type", "application/json", `{"outcomes":[{"email":"a@good.example","outcome":"bounced","bounceType":"permanent","at":"2026-11-20T10:00:00Z"}]}`, `must be hard or soft`},
		{"wrong type", "application/json", `{"outcomes":[{"email":1,"outcome":"delivered","at":"2026-11-20T10:00:00Z"}]}`, `must be a string`},
		{"wrong content type", "text/plain", good, "Content-Type"},
		{"CSV without a header", "text/csv", "bob@good.example,delivered,2026-11-20T10:00:00Z\n", "unknown column"},
		{"CSV without the at column", "text/csv", "email,outcome\nbob@good.example,delivered\n", `no column "at"`},
		{"CSV bad row", "text/csv", "email,outcome,at\nbob@good.example,delivered,2026-11-20T10:00:00Z\nbob@good.example,bounced,2026-11-20\n", `row 3: field "at"`},
		{"CSV short row", "text/csv", "email,outcome,at\nbob@good.example,delivered\n", "row 2: 2 fields"},
		{"CSV header only", "text/csv", "email,outcome,at\n", "no outcomes"},
		{"CSV in UTF-16", "text/csv", "\xff\xfee\x00", "UTF-16"},
	}
	for _, tt := range tests {
		r := h.postOutcomes(h.liveKey, tt.ct, tt.body, nil)
		if r.status != 400 || r.errorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s, want 400 invalid_request", tt.name, r.status, r.body)
			continue
		}
		if msg := r.json(t)["error"].(map[string]any)["message"].(string); !strings.Contains(msg, tt.want) {
			t.Errorf("%s: message %q, want it to say %q", tt.name, msg, tt.want)
		}
	}
	// The refused requests' good outcomes were not stored.
	if r := h.do(req{path: "/v1/outcomes/report", key: h.liveKey}); r.json(t)["outcomes"] != 0.0 {
		t.Errorf("a refused request stored outcomes: %s", r.body)
	}
	if r := h.do(req{method: "DELETE", path: "/v1/outcomes", key: h.liveKey}); r.status != 400 {
		t.Errorf("DELETE without email: %d %s", r.status, r.body)
	}
	if r := h.do(req{method: "DELETE", path: "/v1/outcomes?email=nobody", key: h.liveKey}); r.status != 400 {
		t.Errorf("DELETE of an invalid address: %d %s", r.status, r.body)
	}
	if r := h.do(req{method: "PUT", path: "/v1/outcomes", key: h.liveKey}); r.status != 405 || r.header.Get("Allow") != "POST, DELETE" {
		t.Errorf("PUT: %d Allow %q", r.status, r.header.Get("Allow"))
	}
	if r := h.do(req{path: "/v1/outcomes/report", key: ""}); r.status != 401 {
		t.Errorf("report without a key: %d", r.status)
	}
	// Over the body limit: 413.
	big := `{"outcomes":[` + good + strings.Repeat(" ", 6<<20) + `]}`
	if r := h.postOutcomes(h.liveKey, "application/json", big, nil); r.status != 413 {
		t.Errorf("a body over 6 MiB: %d", r.status)
	}
	// Over the count limit: 400, the count said.
	var b strings.Builder
	b.WriteString("email,outcome,at\n")
	for i := range 50001 {
		fmt.Fprintf(&b, "u%d@good.example,delivered,2026-11-20T10:00:00Z\n", i)
	}
	if r := h.postOutcomes(h.liveKey, "text/csv", b.String(), nil); r.status != 400 || !strings.Contains(string(r.body), "at most 50000") {
		t.Errorf("50,001 outcomes: %d %.200s", r.status, r.body)
	}
}

// TestOutcomesReport: outcomes counted by the verdict and score bucket
// the account was given before them; an address never verified counts as
// not_verified; an outcome older than the verdict does not count it.
func TestOutcomesReport(t *testing.T) {
	h := start(t, options{rcpt: func(addr string) string {
		if strings.HasPrefix(addr, "bob@") || strings.HasSuffix(addr, "@other.example") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown"
	}, server: func(o *server.Options) { o.Config.CacheTTL = 24 * time.Hour }})
	// good.example rejects unknown addresses: bob is deliverable (97);
	// other.example's server takes anyone: risky (60).
	h.verifyDecision(h.liveKey, "bob@good.example")
	h.verifyDecision(h.liveKey, "ann@other.example")
	h.verifyDecision(h.liveKey, "cy@other.example")
	r := h.postOutcomes(h.liveKey, "application/json", `{"outcomes":[
		{"email":"bob@good.example","outcome":"delivered","at":"2026-11-22T10:30:00Z"},
		{"email":"ann@other.example","outcome":"bounced","bounceType":"hard","at":"2026-11-22T10:30:00Z"},
		{"email":"cy@other.example","outcome":"delivered","at":"2026-11-22T10:30:00Z"},
		{"email":"cy@other.example","outcome":"complained","at":"2026-11-22T10:31:00Z"},
		{"email":"cy@other.example","outcome":"bounced","bounceType":"hard","at":"2026-11-21T10:00:00Z"},
		{"email":"new@other.example","outcome":"bounced","bounceType":"soft","at":"2026-11-22T10:30:00Z"},
		{"email":"new@other.example","outcome":"deferred","at":"2026-11-22T10:29:00Z"}]}`, nil)
	if r.status != 200 {
		t.Fatalf("post: %d %s", r.status, r.body)
	}
	r = h.do(req{path: "/v1/outcomes/report", key: h.liveKey})
	if r.status != 200 {
		t.Fatalf("report: %d %s", r.status, r.body)
	}
	var rep struct {
		Outcomes int `json:"outcomes"`
		Rows     []struct {
			Status      string   `json:"status"`
			ScoreBucket *string  `json:"scoreBucket"`
			Sent        int      `json:"sent"`
			Delivered   int      `json:"delivered"`
			HardBounces int      `json:"hardBounces"`
			SoftBounces int      `json:"softBounces"`
			Complaints  int      `json:"complaints"`
			Deferrals   int      `json:"deferrals"`
			BounceRate  *float64 `json:"bounceRate"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(r.body, &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, row := range rep.Rows {
		b := "null"
		if row.ScoreBucket != nil {
			b = *row.ScoreBucket
		}
		rate := "null"
		if row.BounceRate != nil {
			rate = fmt.Sprintf("%.2f", *row.BounceRate)
		}
		got = append(got, fmt.Sprintf("%s %s sent=%d delivered=%d hard=%d soft=%d complaints=%d deferrals=%d rate=%s",
			row.Status, b, row.Sent, row.Delivered, row.HardBounces, row.SoftBounces, row.Complaints, row.Deferrals, rate))
	}
	want := []string{
		"deliverable 80-100 sent=1 delivered=1 hard=0 soft=0 complaints=0 deferrals=0 rate=0.00",
		// ann's bounce, cy's delivery and complaint: verified risky (60) before them.
		"risky 60-79 sent=2 delivered=1 hard=1 soft=0 complaints=1 deferrals=0 rate=0.50",
		// cy's bounce of the day before the check, and the unverified address.
		"not_verified null sent=2 delivered=0 hard=1 soft=1 complaints=0 deferrals=1 rate=0.50",
	}
	if rep.Outcomes != 7 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("report (%d outcomes):\n%s\nwant (7):\n%s", rep.Outcomes, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := h.do(req{path: "/v1/outcomes/report", key: h.otherKey}); r.status != 200 || r.json(t)["outcomes"] != 0.0 {
		t.Errorf("another account's report: %s", r.body)
	}
	if r := h.do(req{path: "/v1/outcomes/report?status=risky", key: h.liveKey}); r.status != 400 {
		t.Errorf("a report with a query: %d", r.status)
	}
}

// TestOutcomesExpire: an outcome is kept EVS_OUTCOME_TTL after it was
// received; then verdicts and the report no longer see it, and the sweep
// deletes it.
func TestOutcomesExpire(t *testing.T) {
	h := start(t, options{rcpt: catchAll, server: func(o *server.Options) { o.Config.OutcomeTTL = 48 * time.Hour }})
	r := h.postOutcomes(h.liveKey, "application/json", `{"outcomes":[{"email":"bob@good.example","outcome":"bounced","bounceType":"hard","at":"2026-11-22T09:00:00Z"}]}`, nil)
	if r.status != 200 {
		t.Fatalf("post: %d %s", r.status, r.body)
	}
	h.clock.Advance(47 * time.Hour)
	if _, d := h.verifyDecision(h.liveKey, "bob@good.example"); d["reason"] != "known_bounce" {
		t.Fatalf("within the TTL: %v", d["reason"])
	}
	h.clock.Advance(time.Hour)
	if _, d := h.verifyDecision(h.liveKey, "bob@good.example"); d["reason"] != "accept_all" || history(d) != nil {
		t.Errorf("after the TTL: %v %v", d["reason"], history(d))
	}
	if r := h.do(req{path: "/v1/outcomes/report", key: h.liveKey}); r.json(t)["outcomes"] != 0.0 {
		t.Errorf("report after the TTL: %s", r.body)
	}
	if _, err := h.st.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := h.st.AddressOutcomes(t.Context(), h.liveAcct, []string{"bob@good.example"})
	if err != nil || len(got) != 0 {
		t.Errorf("after the sweep: %v %v", got, err)
	}
}

// TestOutcomesDomainCountsShared (contract, section 18): with
// EVS_OUTCOME_SHARE_DOMAINS on, one account's outcomes for a domain move
// the score another account sees for the domain's other addresses, as
// counts alone (checks.domainHistory, scope "shared"), for the addresses
// it had verified; none of the first account's addresses' own evidence
// crosses over; deleting an address takes its outcomes out of the counts.
func TestOutcomesDomainCountsShared(t *testing.T) {
	// The result cache (24 h) is what tells which addresses an account
	// verified.
	h := start(t, options{rcpt: catchAll, server: func(o *server.Options) {
		o.Config.OutcomeShareDomains, o.Config.CacheTTL = true, 24*time.Hour
	}})
	_, secondKey := h.account("second", false)
	var rows []string
	for i := range 10 {
		h.verifyDecision(h.liveKey, fmt.Sprintf("u%d@good.example", i))
		rows = append(rows, fmt.Sprintf(`{"email":"u%d@good.example","outcome":"bounced","bounceType":"hard","at":"2026-11-22T10:%02d:00Z"}`, i, i))
	}
	if r := h.postOutcomes(h.liveKey, "application/json", `{"outcomes":[`+strings.Join(rows, ",")+`]}`, nil); r.status != 200 {
		t.Fatalf("post outcomes: %d %s", r.status, r.body)
	}
	// (10×0.60 + 0) / (10 + 10) = 30.
	status, d := h.verifyDecision(secondKey, "u0@good.example")
	dh := domainHistory(d)
	if status != "risky" || d["score"] != 30.0 || history(d) != nil || dh == nil || dh["scope"] != "shared" || dh["hardBounces"] != 10.0 || dh["delivered"] != 0.0 {
		t.Fatalf("the second account: %s score %v, history %v, domain %v", status, d["score"], history(d), dh)
	}
	// The first account's own address is still its known bounce.
	if _, d := h.verifyDecision(h.liveKey, "u0@good.example"); d["reason"] != "known_bounce" {
		t.Errorf("the first account's bounced address: %v", d["reason"])
	}
	for i := range 5 {
		if r := h.do(req{method: "DELETE", path: fmt.Sprintf("/v1/outcomes?email=u%d@good.example", i), key: h.liveKey}); r.status != 200 {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
	}
	// (6 + 0) / (10 + 5) = 40.
	if _, d := h.verifyDecision(secondKey, "new@good.example"); d["score"] != 40.0 || domainHistory(d)["hardBounces"] != 5.0 {
		t.Errorf("after deleting five: score %v, domain %v", d["score"], domainHistory(d))
	}
}

// TestOutcomesSharedNotPoisoned (contract, section 18): with domain counts
// shared, 5,000 hard bounces an account makes up for addresses of a domain
// it never verified leave another account's score for the domain as it
// was: an account moves the shared counts only by addresses it verified.
func TestOutcomesSharedNotPoisoned(t *testing.T) {
	// The result cache (24 h) is what tells which addresses an account
	// verified.
	h := start(t, options{rcpt: catchAll, server: func(o *server.Options) {
		o.Config.OutcomeShareDomains, o.Config.CacheTTL = true, 24*time.Hour
	}})
	_, victim := h.account("victim", false)
	_, before := h.verifyDecision(victim, "someone@good.example")
	rows := make([]string, 5000)
	for i := range rows {
		rows[i] = fmt.Sprintf(`{"email":"made-up-%d@good.example","outcome":"bounced","bounceType":"hard","at":"2026-11-22T10:01:00Z"}`, i)
	}
	if r := h.postOutcomes(h.liveKey, "application/json", `{"outcomes":[`+strings.Join(rows, ",")+`]}`, nil); r.status != 200 || r.json(t)["accepted"] != 5000.0 {
		t.Fatalf("post outcomes: %d %s", r.status, r.body)
	}
	_, after := h.verifyDecision(victim, "someone-else@good.example")
	if after["score"] != before["score"] || domainHistory(after) != nil {
		t.Fatalf("another account's score moved from %v to %v (domain %v)", before["score"], after["score"], domainHistory(after))
	}
}
