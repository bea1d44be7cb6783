package server_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/testkit"
)

type envelope struct {
	Request struct {
		ID          string `json:"id"`
		Mode        string `json:"mode"`
		State       string `json:"state"`
		CreatedAt   string `json:"createdAt"`
		CompletedAt string `json:"completedAt"`
		Error       string `json:"error"`
		Name        string `json:"name"`
	} `json:"request"`
	Counters struct {
		Total, Duplicates, Processed, Deliverable, Undeliverable, Risky, Unknown int
	} `json:"counters"`
	RequestID string `json:"requestId"`
	Replayed  bool   `json:"replayed"`
}

func decodeEnvelope(t *testing.T, r reply) envelope {
	t.Helper()
	var e envelope
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("batch envelope: %v: %s", err, r.body)
	}
	return e
}

// checkInvariants asserts the contract's counter invariants.
func checkInvariants(t *testing.T, e envelope, prev *envelope) {
	t.Helper()
	c := e.Counters
	if c.Processed != c.Deliverable+c.Undeliverable+c.Risky+c.Unknown {
		t.Fatalf("processed %d != sum of statuses: %+v", c.Processed, c)
	}
	if c.Processed > c.Total-c.Duplicates {
		t.Fatalf("processed %d > total - duplicates: %+v", c.Processed, c)
	}
	if e.Request.State == "completed" && c.Processed != c.Total-c.Duplicates {
		t.Fatalf("completed with processed %d != %d", c.Processed, c.Total-c.Duplicates)
	}
	if prev != nil {
		p := prev.Counters
		if c.Processed < p.Processed || c.Deliverable < p.Deliverable || c.Undeliverable < p.Undeliverable || c.Risky < p.Risky || c.Unknown < p.Unknown {
			t.Fatalf("counters went down: %+v then %+v", p, c)
		}
		if isFinal(prev.Request.State) && e.Request.State != prev.Request.State {
			t.Fatalf("final state %s changed to %s", prev.Request.State, e.Request.State)
		}
	}
}

func isFinal(s string) bool { return s == "completed" || s == "cancelled" || s == "failed" }

// poll polls a batch until it is final, checking the invariants each time.
func (h *harness) poll(key, id string, limit time.Duration) envelope {
	h.t.Helper()
	var prev *envelope
	var final envelope
	testkit.Eventually(h.t, limit, func() error {
		r := h.do(req{path: "/v1/requests/" + id, key: key})
		if r.status != 200 {
			h.t.Fatalf("poll: %d %s", r.status, r.body)
		}
		e := decodeEnvelope(h.t, r)
		checkInvariants(h.t, e, prev)
		if e.Replayed {
			h.t.Fatal("GET says replayed")
		}
		if isFinal(e.Request.State) {
			final = e
			return nil
		}
		prev = &e
		return fmt.Errorf("batch not final: %s", r.body)
	})
	return final
}

func emailsJSON(emails []string) string {
	b, _ := json.Marshal(emails)
	return string(b)
}

func TestBatchLifecycle(t *testing.T) {
	h := start(t, options{realClock: true})
	var emails []string
	for i := 0; i < 300; i++ {
		emails = append(emails, fmt.Sprintf("user%d@x%d.example", i, i%7))
	}
	emails = append(emails, "rejected_email@x.example", "accept_all@y.example", "not an address", "USER1@X1.example", "user1@x1.EXAMPLE")
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":` + emailsJSON(emails) + `,"mode":"quick"}`, headers: map[string]string{"Idempotency-Key": "batch-1"}})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	created := decodeEnvelope(t, r)
	// user1@x1.example once: the same address in other case is its
	// duplicate, twice.
	if created.Request.Mode != "quick" || created.Counters.Total != len(emails) || created.Counters.Duplicates != 2 || created.Replayed {
		t.Fatalf("created: %s", r.body)
	}
	final := h.poll(h.testKey, created.Request.ID, 30*time.Second)
	if final.Request.State != "completed" || final.Request.CompletedAt == "" {
		t.Fatalf("final: %+v", final)
	}
	distinct := len(emails) - 2
	if final.Counters.Processed != distinct || final.Counters.Undeliverable != 2 || final.Counters.Risky != 1 {
		t.Fatalf("counters: %+v", final.Counters)
	}

	// Replay of the creation: 200, the current envelope, replayed true.
	again := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":` + emailsJSON(emails) + `,"mode":"quick"}`, headers: map[string]string{"Idempotency-Key": "batch-1"}})
	re := decodeEnvelope(t, again)
	if again.status != 200 || !re.Replayed || re.Request.ID != created.Request.ID || re.Request.State != "completed" || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", again.status, again.body)
	}

	// Page through every result: each distinct address once, in order.
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		path := "/v1/requests/" + created.Request.ID + "/results?limit=37"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		pr := h.do(req{path: path, key: h.testKey})
		if pr.status != 200 {
			t.Fatalf("results: %d %s", pr.status, pr.body)
		}
		var page struct {
			Results []struct {
				Email    string         `json:"email"`
				Status   string         `json:"status"`
				Decision map[string]any `json:"decision"`
			} `json:"results"`
			NextCursor *string `json:"nextCursor"`
		}
		if err := json.Unmarshal(pr.body, &page); err != nil {
			t.Fatal(err)
		}
		for _, res := range page.Results {
			got = append(got, res.Email)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
		if pages > 100 {
			t.Fatal("too many pages")
		}
	}
	want := append([]string(nil), emails[:len(emails)-2]...)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("results: got %d addresses, want %d in submission order", len(got), len(want))
	}

	// Status filter and CSV.
	fr := h.do(req{path: "/v1/requests/" + created.Request.ID + "/results?status=undeliverable", key: h.testKey})
	if n := len(fr.json(t)["results"].([]any)); n != 2 {
		t.Fatalf("undeliverable filter: %d results", n)
	}
	cr := h.do(req{path: "/v1/requests/" + created.Request.ID + "/results", key: h.testKey, headers: map[string]string{"Accept": "text/csv"}})
	rows, err := csv.NewReader(strings.NewReader(string(cr.body))).ReadAll()
	if err != nil || cr.status != 200 {
		t.Fatalf("csv: %d %v", cr.status, err)
	}
	if strings.Join(rows[0], ",") != "email,status,reason,suggestion,disposable,role,free,acceptAll,provider,score" || len(rows) != distinct+1 {
		t.Fatalf("csv: header %v, %d rows", rows[0], len(rows))
	}
	// The provider column is checks.smtp.provider: the sandbox's MX is
	// nobody's ("other"), and an address with no MX has none.
	for _, row := range rows[1:] {
		want := "other"
		if row[2] == "invalid_syntax" || row[2] == "invalid_domain" || row[2] == "no_mail_server" || row[2] == "dns_error" {
			want = ""
		}
		if row[8] != want {
			t.Fatalf("csv row %v: provider %q, want %q", row, row[8], want)
		}
	}

	// A final batch cannot be cancelled.
	cc := h.do(req{method: "POST", path: "/v1/requests/" + created.Request.ID + "/cancel", key: h.testKey})
	if cc.status != 409 || cc.errorCode(t) != "invalid_state" {
		t.Fatalf("cancel completed: %d %s", cc.status, cc.body)
	}
}

func TestBatchCSVUpload(t *testing.T) {
	h := start(t, options{realClock: true})
	body := "email,name\naccepted_email@x.example,A\n\nrejected_email@x.example,B\n\"mailbox_full@x.example\",C\n"
	r := h.do(req{method: "POST", path: "/v1/requests?mode=quick", key: h.testKey, body: body, headers: map[string]string{"Content-Type": "text/csv"}})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	e := decodeEnvelope(t, r)
	if e.Counters.Total != 3 || e.Request.Mode != "quick" {
		t.Fatalf("created: %s", r.body)
	}
	final := h.poll(h.testKey, e.Request.ID, 30*time.Second)
	if final.Counters.Deliverable != 1 || final.Counters.Undeliverable != 1 || final.Counters.Risky != 1 {
		t.Fatalf("counters: %+v", final.Counters)
	}
}

// TestBatchCancel: cancel stops new work promptly; results already written
// stay readable and counters never go down.
func TestBatchCancel(t *testing.T) {
	// The peer answers 20 RCPTs, then holds the rest until released; the
	// prober waits for a reply longer than the test.
	gate := testkit.NewRcptGate(20)
	idle := make(chan struct{}, 1) // the runner's queue ran dry
	h := start(t, options{realClock: true, replyTimeout: 5 * time.Minute, rcpt: func(addr string) string {
		gate.Wait(false)
		return "250 2.1.5 OK"
	}, batch: batch.LocalConfig{Idle: func() {
		select {
		case idle <- struct{}{}:
		default:
		}
	}}})
	t.Cleanup(gate.Release)
	var emails []string
	for i := 0; i < 400; i++ {
		emails = append(emails, fmt.Sprintf("alice%d@good.example", i))
	}
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":` + emailsJSON(emails) + `}`})
	id := decodeEnvelope(t, r).Request.ID
	// The batch is under way, and held: some verdicts written, not all.
	testkit.Eventually(t, 20*time.Second, testkit.Until(func() bool { return gate.Held() > 0 }, "the SMTP peer holds no RCPT"))
	select {
	case <-idle: // a lull before the batch's steps were queued
	default:
	}
	c := h.do(req{method: "POST", path: "/v1/requests/" + id + "/cancel", key: h.liveKey})
	if c.status != 200 {
		t.Fatalf("cancel: %d %s", c.status, c.body)
	}
	ce := decodeEnvelope(t, c)
	if ce.Request.State != "cancelled" || ce.Request.CompletedAt == "" {
		t.Fatalf("cancel reply: %s", c.body)
	}
	// With the peer answering again at once, the cancelled batch's
	// sessions would run on to the end; instead its work stops and the
	// runner's queue runs dry.
	gate.Release()
	testkit.Receive(t, idle, 20*time.Second, "the runner's queue to run dry after the cancel")
	after := h.poll(h.liveKey, id, time.Second)
	checkInvariants(t, after, &ce)
	if after.Counters.Processed >= len(emails) {
		t.Fatalf("cancel did not stop the work: %+v", after.Counters)
	}
	again := h.do(req{method: "POST", path: "/v1/requests/" + id + "/cancel", key: h.liveKey})
	if again.status != 409 || again.errorCode(t) != "invalid_state" {
		t.Fatalf("second cancel: %d %s", again.status, again.body)
	}
}

// TestBatchResume: stopping the server mid-batch and starting it again on
// the same data directory finishes the batch, and the final counters equal
// the number of distinct addresses — nothing lost, nothing counted twice.
// The first server is stopped only once its SMTP peer holds a RCPT
// unanswered, so the batch is provably unfinished when it stops.
func TestBatchResume(t *testing.T) {
	const per, distinct = 50, 500 // recipients per SMTP connection; addresses
	dir := t.TempDir()
	// One domain, so connections run one after another: the peer answers
	// two connections' worth of RCPTs (plus the accept-all probe) and part
	// of the third, then holds every RCPT until released.
	gate := testkit.NewRcptGate(2*per + per/2)
	rcpt := func(addr string) string {
		gate.Wait(false)
		if strings.HasPrefix(addr, "alice") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 user unknown" // the accept-all probe
	}
	// The reply timeout outlasts the test, so a held RCPT stays unanswered
	// rather than turning into an "unknown" verdict.
	const replyTimeout = 5 * time.Minute
	o := options{realClock: true, dir: dir, rcpt: rcpt, replyTimeout: replyTimeout, worker: batch.Worker{Processor: &batch.Processor{PerConnection: per}}}
	h := start(t, o)
	// Cleanups run last first: held sessions are let go before the peer's
	// own cleanup waits for them.
	t.Cleanup(gate.Release)
	var emails []string
	for i := 0; i < distinct+100; i++ {
		emails = append(emails, fmt.Sprintf("alice%d@good.example", i%distinct)) // 100 duplicates
	}
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":` + emailsJSON(emails) + `}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID

	testkit.Eventually(t, 15*time.Second, testkit.Until(func() bool { return gate.Held() > 0 }, "the SMTP peer held no RCPT after the batch was created"))
	e := decodeEnvelope(t, h.do(req{path: "/v1/requests/" + id, key: h.liveKey}))
	if e.Request.State != "running" || e.Counters.Processed >= distinct {
		t.Fatalf("with a RCPT held the batch is %s with %d processed; want running and unfinished", e.Request.State, e.Counters.Processed)
	}
	h.stop()
	// What the stopped server left in the store: still running, with the
	// verdicts of the two finished connections kept and nothing more.
	b, err := h.st.Batch(context.Background(), h.liveAcct, id)
	if err != nil {
		t.Fatal(err)
	}
	if b.State != "running" || b.Counters.Processed != 2*per {
		t.Fatalf("after the stop: %s with %+v; want running with %d processed", b.State, b.Counters, 2*per)
	}
	// The held RCPT was still unanswered when the server stopped: no
	// reply timeout turned it, or its connection, into unknown verdicts.
	if b.Counters.Unknown != 0 {
		t.Fatalf("after the stop: %+v; a held RCPT timed out before the stop", b.Counters)
	}
	h.st.Close()
	gate.Release()

	h2 := start(t, o)
	final := h2.poll(h.liveKey, id, 60*time.Second)
	want := envelope{}.Counters
	want.Total, want.Duplicates, want.Processed, want.Deliverable = len(emails), 100, distinct, distinct
	if final.Request.State != "completed" || final.Counters != want {
		t.Fatalf("after restart: %s with %+v; want completed with %+v", final.Request.State, final.Counters, want)
	}
	// The restart verified only the addresses the first run left pending.
	asked := 0
	for _, c := range h2.smtp.Commands() {
		if strings.HasPrefix(c, "RCPT TO:<alice") {
			asked++
		}
	}
	if asked != distinct-2*per {
		t.Fatalf("the restarted server asked about %d addresses; want the %d still pending", asked, distinct-2*per)
	}
}

// TestIdleAfterLastBatch: the runner tells the server when its last batch
// has stopped (the server frees memory then), and not before.
func TestIdleAfterLastBatch(t *testing.T) {
	idle := make(chan struct{}, 10)
	h := start(t, options{realClock: true, batch: batch.LocalConfig{Idle: func() { idle <- struct{}{} }}})
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":["a@x.example","b@y.example"],"mode":"quick"}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	select {
	case <-idle:
	case <-time.After(30 * time.Second):
		t.Fatal("no idle call after the batch")
	}
	// The batch had stopped before: it is final by then.
	id := decodeEnvelope(t, r).Request.ID
	if e := decodeEnvelope(t, h.do(req{path: "/v1/requests/" + id, key: h.testKey})); e.Request.State != "completed" {
		t.Fatalf("batch %s when the runner went idle", e.Request.State)
	}
}

// TestBatchCSVColumns: a CSV list's address column is found by its header
// or named, its delimiter sniffed or named, on a body and on an upload;
// a column or delimiter that cannot apply is a 400 naming why.
func TestBatchCSVColumns(t *testing.T) {
	h := start(t, options{realClock: true})
	csvType := map[string]string{"Content-Type": "text/csv"}
	emailsOf := func(r reply) []string {
		t.Helper()
		if r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		id := decodeEnvelope(t, r).Request.ID
		h.poll(h.testKey, id, 30*time.Second)
		p := h.do(req{path: "/v1/requests/" + id + "/results", key: h.testKey})
		var page struct {
			Results []struct {
				Email string `json:"email"`
			} `json:"results"`
		}
		if err := json.Unmarshal(p.body, &page); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, res := range page.Results {
			got = append(got, res.Email)
		}
		return got
	}
	for _, tc := range []struct {
		name, query, body string
		want              []string
	}{
		{"name,email export", "", "name,email\nBob,accepted_email@x.example\nAnn,rejected_email@x.example\n",
			[]string{"accepted_email@x.example", "rejected_email@x.example"}},
		{"Excel's semicolons", "", "Name;E-Mail\nSmith, Bob;accepted_email@x.example\n",
			[]string{"accepted_email@x.example"}},
		{"a stray quote is one bad row, not a bad file", "", "email\naccepted_email@x.example\nbad\"row@x.example\nrejected_email@x.example\n",
			[]string{"accepted_email@x.example", "bad\"row@x.example", "rejected_email@x.example"}},
		{"named column and delimiter", "?column=2&delimiter=tab", "work\thome\na@work.example\taccepted_email@home.example\n",
			[]string{"accepted_email@home.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := emailsOf(h.do(req{method: "POST", path: "/v1/requests" + tc.query, key: h.testKey, body: tc.body, headers: csvType}))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("verified %q, want %q", got, tc.want)
			}
		})
	}

	id, putURL := h.newUpload(h.testKey, "text/csv")
	if r := h.put(putURL, "text/csv", strings.NewReader("home|work\naccepted_email@home.example|x@work.example\n")); r.status != 200 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	got := emailsOf(h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"uploadId":"` + id + `","column":"HOME"}`}))
	if !slices.Equal(got, []string{"accepted_email@home.example"}) {
		t.Fatalf("upload with a named column verified %q", got)
	}

	for _, tc := range []struct {
		name, query, body, ctype, want string
	}{
		{"unknown delimiter", "?delimiter=%3A", "a@x.example\n", "text/csv", "delimiter must be"},
		{"column zero", "?column=0", "a@x.example\n", "text/csv", "start at 1"},
		{"column not in the header", "?column=mail", "name,email\nBob,a@x.example\n", "text/csv", "header has no column"},
		{"column with emails", "", `{"emails":["a@x.example"],"column":"email"}`, "application/json", "for a CSV list"},
		{"column in a JSON body's query", "?column=email", `{"emails":["a@x.example"]}`, "application/json", "goes in the body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(req{method: "POST", path: "/v1/requests" + tc.query, key: h.testKey, body: tc.body, headers: map[string]string{"Content-Type": tc.ctype}})
			if r.status != 400 || r.errorCode(t) != "invalid_request" || !strings.Contains(string(r.body), tc.want) {
				t.Fatalf("%d %s; want 400 invalid_request saying %q", r.status, r.body, tc.want)
			}
		})
	}
}
