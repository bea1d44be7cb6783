package server_test

import (
	"encoding/csv"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestResultFiltersTakeLists: status= takes a comma-separated list and
// reason= a list of reason codes, on JSON pages (paged one by one) and in
// the CSV alike; a cursor holds for the same filter in any order of its
// list and for no other; a label that is none of the contract's is 400.
func TestResultFiltersTakeLists(t *testing.T) {
	h := start(t, options{})
	emails := []string{"accepted_email@x.example", "rejected_email@x.example", "accept_all@y.example",
		"mailbox_full@x.example", "invalid_domain@x.example", "accepted_email@z.example", "not an address"}
	id := completedBatch(t, h, emails, "quick")
	cases := []struct {
		q    url.Values
		want []string
	}{
		{url.Values{"status": {"deliverable,risky"}}, []string{"accepted_email@x.example", "accept_all@y.example", "mailbox_full@x.example", "accepted_email@z.example"}},
		{url.Values{"status": {"undeliverable"}}, []string{"rejected_email@x.example", "invalid_domain@x.example", "not an address"}},
		{url.Values{"reason": {"rejected_email,accept_all"}}, []string{"rejected_email@x.example", "accept_all@y.example"}},
		{url.Values{"status": {"risky,undeliverable"}, "reason": {"mailbox_full,invalid_syntax"}}, []string{"mailbox_full@x.example", "not an address"}},
		{url.Values{"status": {"risky,deliverable"}, "minScore": {"90"}}, []string{"accepted_email@x.example", "accepted_email@z.example"}},
	}
	for _, c := range cases {
		q := url.Values{"limit": {"1"}}
		for k, v := range c.q {
			q[k] = v
		}
		got, _ := resultPages(t, h, id, q)
		var emails []string
		for _, r := range got {
			emails = append(emails, r.Email)
		}
		if !slices.Equal(emails, c.want) {
			t.Errorf("%s: pages give %v, want %v", c.q.Encode(), emails, c.want)
		}
		r := h.do(req{path: "/v1/requests/" + id + "/results?" + c.q.Encode(), key: h.testKey, headers: map[string]string{"Accept": "text/csv"}})
		rows, err := csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
		if err != nil || r.status != 200 {
			t.Fatalf("csv %s: %d %v", c.q.Encode(), r.status, err)
		}
		emails = nil
		for _, row := range rows[1:] {
			emails = append(emails, row[0])
		}
		if !slices.Equal(emails, c.want) {
			t.Errorf("csv %s: %v, want %v", c.q.Encode(), emails, c.want)
		}
	}

	first := h.do(req{path: "/v1/requests/" + id + "/results?limit=1&status=deliverable,risky", key: h.testKey}).json(t)
	cur, _ := first["nextCursor"].(string)
	for q, want := range map[string]int{
		"status=risky,deliverable": 200, "status=deliverable,risky,risky": 200,
		"status=deliverable": 400, "status=deliverable,risky&reason=accept_all": 400,
	} {
		if r := h.do(req{path: "/v1/requests/" + id + "/results?" + q + "&cursor=" + url.QueryEscape(cur), key: h.testKey}); r.status != want {
			t.Errorf("a cursor of status=deliverable,risky with %s: %d %s, want %d", q, r.status, r.body, want)
		}
	}
	for _, q := range []string{"status=good", "status=deliverable,", "status=", "reason=nope", "reason=accepted_email,,", "reason="} {
		if r := h.do(req{path: "/v1/requests/" + id + "/results?" + q, key: h.testKey}); r.status != 400 || r.errorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s, want 400", q, r.status, r.body)
		}
	}
}

// TestListBatchesByState: GET /v1/requests?state= lists the account's
// batches in those states only, newest first, paged with a cursor that
// holds for that filter alone; a state that is none of the contract's is
// 400.
func TestListBatchesByState(t *testing.T) {
	h := start(t, options{rcpt: func(addr string) string { return "451 4.7.1 Greylisted, try again later" }})
	var completed []string
	for i := range 3 {
		completed = append([]string{h.createQuick(h.testKey, i+1).Request.ID}, completed...)
		h.clock.Advance(time.Second)
	}
	// A live batch whose server greylists stays running for its back-off.
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":["grey@good.example"],"mode":"full"}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	running := decodeEnvelope(t, r).Request.ID
	waitFor(t, "the live batch to start", func() bool {
		return h.do(req{path: "/v1/requests/" + running, key: h.liveKey}).json(t)["request"].(map[string]any)["state"] == "running"
	})
	for _, id := range completed {
		if e := h.poll(h.testKey, id, time.Minute); e.Request.State != "completed" {
			t.Fatalf("batch %s: %s", id, e.Request.State)
		}
	}
	ids := func(key string, q url.Values) []string {
		var out []string
		for {
			p := h.list(key, q)
			for _, e := range p.Requests {
				out = append(out, e.Request.ID)
			}
			if p.NextCursor == nil {
				return out
			}
			q.Set("cursor", *p.NextCursor)
		}
	}
	if got := ids(h.testKey, url.Values{"state": {"completed"}, "limit": {"1"}}); !slices.Equal(got, completed) {
		t.Errorf("completed, a page at a time: %v, want %v", got, completed)
	}
	if got := ids(h.testKey, url.Values{"state": {"running,queued"}}); len(got) != 0 {
		t.Errorf("the test account has no running batch: %v", got)
	}
	if got := ids(h.liveKey, url.Values{"state": {"queued,running"}}); !slices.Equal(got, []string{running}) {
		t.Errorf("running: %v, want %v", got, running)
	}
	if got := ids(h.liveKey, url.Values{"state": {"completed,failed,cancelled"}}); len(got) != 0 {
		t.Errorf("the live account's final batches: %v", got)
	}
	p := h.list(h.testKey, url.Values{"state": {"completed"}, "limit": {"1"}})
	for _, q := range []string{"", "&state=running", "&state=completed,running"} {
		if r := h.do(req{path: "/v1/requests?cursor=" + url.QueryEscape(*p.NextCursor) + q, key: h.testKey}); r.status != 400 {
			t.Errorf("a cursor of state=completed with %q: %d %s", q, r.status, r.body)
		}
	}
	for _, q := range []string{"state=done", "state=", "state=completed,"} {
		if r := h.do(req{path: "/v1/requests?" + q, key: h.testKey}); r.status != 400 || r.errorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s, want 400", q, r.status, r.body)
		}
	}
}

// TestBatchNames: a batch may be given a name at creation (a JSON field,
// or ?name= with a CSV body), shown by GET and in the list (the webhook's
// event carries the same request object); an empty, overlong or
// multi-line name is 400, and a JSON body's name in the query too.
func TestBatchNames(t *testing.T) {
	h := start(t, options{})
	name := "Newsletter — März 2026"
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":["accepted_email@x.example"],"mode":"quick","name":"` + name + `"}`})
	if r.status != 201 || r.json(t)["request"].(map[string]any)["name"] != name {
		t.Fatalf("create with a name: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID
	if g := h.do(req{path: "/v1/requests/" + id, key: h.testKey}).json(t); g["request"].(map[string]any)["name"] != name {
		t.Errorf("GET: %v", g["request"])
	}
	r = h.do(req{method: "POST", path: "/v1/requests?mode=quick&name=" + url.QueryEscape("from a CSV"), key: h.testKey,
		headers: map[string]string{"Content-Type": "text/csv"}, body: "accepted_email@y.example\n"})
	if r.status != 201 || r.json(t)["request"].(map[string]any)["name"] != "from a CSV" {
		t.Fatalf("CSV with ?name=: %d %s", r.status, r.body)
	}
	unnamed := h.createQuick(h.testKey, 1)
	if _, has := h.do(req{path: "/v1/requests/" + unnamed.Request.ID, key: h.testKey}).json(t)["request"].(map[string]any)["name"]; has {
		t.Errorf("a batch without a name shows one")
	}
	names := map[string]any{}
	for _, e := range h.list(h.testKey, nil).Requests {
		names[e.Request.ID] = e.Request.Name
	}
	if names[id] != name || names[unnamed.Request.ID] != "" {
		t.Errorf("listed names: %v", names)
	}
	for _, bad := range []string{`""`, `"   "`, `"two\nlines"`, `"` + strings.Repeat("é", 201) + `"`} {
		r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":["a@x.example"],"name":` + bad + `}`})
		if r.status != 400 || r.errorCode(t) != "invalid_request" {
			t.Errorf("name %s: %d %s", bad, r.status, r.body)
		}
	}
	if r := h.do(req{method: "POST", path: "/v1/requests?name=x", key: h.testKey, body: `{"emails":["a@x.example"]}`}); r.status != 400 {
		t.Errorf("a JSON body's name in the query: %d %s", r.status, r.body)
	}
	if r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":["a@x.example"],"name":"` + strings.Repeat("é", 200) + `"}`}); r.status != 201 {
		t.Errorf("a name of 200 characters: %d %s", r.status, r.body)
	}
}
