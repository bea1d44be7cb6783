package server_test

import (
	"encoding/csv"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// docScores is the table of docs/score.md for what the sandbox gives each
// reason: the sandbox's evidence is that of a live check whose mail host is
// nobody's ("other"), whose random-address probe was rejected for an
// accepted mailbox and accepted for an accept-all domain, and whose domain
// publishes an MX record.
var docScores = map[evs.Reason]int{
	evs.ReasonAcceptedEmail:     97,
	evs.ReasonInvalidSyntax:     0,
	evs.ReasonInvalidDomain:     1,
	evs.ReasonNoMailServer:      1,
	evs.ReasonRejectedEmail:     2,
	evs.ReasonKnownBounce:       1,
	evs.ReasonAcceptAll:         60,
	evs.ReasonMailboxFull:       25,
	evs.ReasonDisposable:        15,
	evs.ReasonGreylisted:        45,
	evs.ReasonSMTPUnreachable:   30,
	evs.ReasonBlocked:           40,
	evs.ReasonAmbiguousReply:    40,
	evs.ReasonDNSError:          20,
	evs.ReasonTimeout:           35,
	evs.ReasonMailboxNotChecked: 55,
}

// scoredResult is one row of a results page, with what the score test
// reads.
type scoredResult struct {
	Email    string `json:"email"`
	Status   string `json:"status"`
	Decision struct {
		Reason   string `json:"reason"`
		Score    *int   `json:"score"`
		TestMode bool   `json:"testMode"`
		Flags    struct {
			Role bool `json:"role"`
		} `json:"flags"`
	} `json:"decision"`
}

// scoreBatch runs a full-mode test-mode batch with one address for every
// reason, a role mailbox, a disposable domain and a plain address, and
// returns its id, the addresses and the score docs/score.md gives each.
func scoreBatch(t *testing.T, h *harness) (string, []string, map[string]int) {
	t.Helper()
	want := map[string]int{}
	var emails []string
	for _, r := range evs.Reasons() {
		e := string(r) + "@x.example"
		emails = append(emails, e)
		want[e] = docScores[r]
	}
	extra := map[string]int{
		"alice@x.example":                97, // plain: what a live full check gives, accepted and proven
		"admin+accepted-email@x.example": 87, // a role mailbox: 97 less 10
		"admin+greylisted@x.example":     35, // 45 less 10
		"carol@mailinator.com":           15, // a disposable domain
	}
	for e, s := range extra {
		emails = append(emails, e)
		want[e] = s
	}
	return completedBatch(t, h, emails, "full"), emails, want
}

// completedBatch creates a test-mode batch and waits for it to complete.
func completedBatch(t *testing.T, h *harness, emails []string, mode string) string {
	t.Helper()
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":` + emailsJSON(emails) + `,"mode":"` + mode + `"}`})
	if r.status != 201 {
		t.Fatalf("create: %d %.300s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID
	if final := h.poll(h.testKey, id, 60*time.Second); final.Request.State != "completed" {
		t.Fatalf("batch ended %s", final.Request.State)
	}
	return id
}

// resultPages reads every page of a batch's results with the given query
// (limit, status, minScore), following nextCursor, and returns the results
// and the number of pages.
func resultPages(t *testing.T, h *harness, id string, q url.Values) ([]scoredResult, int) {
	t.Helper()
	var all []scoredResult
	for pages := 1; ; pages++ {
		r := h.do(req{path: "/v1/requests/" + id + "/results?" + q.Encode(), key: h.testKey})
		if r.status != 200 {
			t.Fatalf("results %s: %d %s", q.Encode(), r.status, r.body)
		}
		var page struct {
			Results    []scoredResult `json:"results"`
			NextCursor *string        `json:"nextCursor"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Results...)
		if page.NextCursor == nil {
			return all, pages
		}
		if pages > 100 {
			t.Fatal("too many pages")
		}
		q.Set("cursor", *page.NextCursor)
	}
}

// TestScoreTestModeTable: every test-mode outcome carries the score of the
// documented table, on results pages and in the CSV's score column.
func TestScoreTestModeTable(t *testing.T) {
	t.Parallel()
	h := start(t, options{realClock: true}) // greylisted@… waits out its 1 s back-offs
	id, emails, want := scoreBatch(t, h)
	got, _ := resultPages(t, h, id, url.Values{})
	if len(got) != len(emails) {
		t.Fatalf("%d results, want %d", len(got), len(emails))
	}
	for _, r := range got {
		if r.Decision.Score == nil || *r.Decision.Score != want[r.Email] || !r.Decision.TestMode {
			t.Errorf("%s (%s): score %v, want %d", r.Email, r.Decision.Reason, r.Decision.Score, want[r.Email])
		}
	}

	cr := h.do(req{path: "/v1/requests/" + id + "/results", key: h.testKey, headers: map[string]string{"Accept": "text/csv"}})
	rows, err := csv.NewReader(strings.NewReader(string(cr.body))).ReadAll()
	if err != nil || cr.status != 200 || len(rows) != len(emails)+1 {
		t.Fatalf("csv: %d %v, %d rows", cr.status, err, len(rows))
	}
	if rows[0][len(rows[0])-1] != "score" {
		t.Fatalf("csv header %v: score is not the last column", rows[0])
	}
	for _, row := range rows[1:] {
		if row[len(row)-1] != strconv.Itoa(want[row[0]]) {
			t.Errorf("csv %v: score %s, want %d", row, row[len(row)-1], want[row[0]])
		}
	}

	// One address, both modes, through POST /v1/verify: quick mode never
	// probes, so the plain address is a mailbox not checked at a domain
	// with an MX record.
	for mode, s := range map[string]int{"full": 97, "quick": 55} {
		r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"alice@x.example","mode":"` + mode + `"}`})
		d, _ := r.json(t)["decision"].(map[string]any)
		if r.status != 200 || d["score"] != float64(s) {
			t.Errorf("verify %s: %d, score %v, want %d", mode, r.status, d["score"], s)
		}
	}
}

// TestScoreLiveEngine: the live engine's decisions are scored from their
// evidence: the loopback mail server accepts alice@ and rejects a random
// address, so alice@ is proven (and says so in checks.smtp.catchAll).
func TestScoreLiveEngine(t *testing.T) {
	h := start(t, options{})
	for _, tt := range []struct {
		email, mode, catchAll string
		score                 int
	}{
		{"alice@good.example", "full", "rejected", 97},
		{"nobody@good.example", "full", "", 2},
		{"alice@good.example", "quick", "", 55},
		{"alice@missing.example", "full", "", 1},
	} {
		r := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"` + tt.email + `","mode":"` + tt.mode + `"}`})
		d, _ := r.json(t)["decision"].(map[string]any)
		smtp, _ := d["checks"].(map[string]any)["smtp"].(map[string]any)
		catchAll, _ := smtp["catchAll"].(string)
		if r.status != 200 || d["score"] != float64(tt.score) || catchAll != tt.catchAll {
			t.Errorf("%s %s: %d, score %v catchAll %q, want %d %q: %s", tt.mode, tt.email, r.status, d["score"], catchAll, tt.score, tt.catchAll, r.body)
		}
	}
}

// TestScoreMinScoreFilter: minScore keeps the results scoring at least
// that, with or without status, in JSON pages (a page may be short, the
// cursor still walks every result once) and in CSV; anything but a whole
// number from 0 to 100 is refused.
func TestScoreMinScoreFilter(t *testing.T) {
	t.Parallel()
	h := start(t, options{realClock: true})
	id, emails, want := scoreBatch(t, h)
	status := func(e string) string {
		local := e[:strings.IndexByte(e, '@')]
		if i := strings.LastIndexByte(local, '+'); i >= 0 {
			local = local[i+1:]
		}
		r := evs.Reason(strings.ReplaceAll(local, "-", "_"))
		switch {
		case strings.HasSuffix(e, "@mailinator.com"):
			return string(evs.Risky)
		case r.Valid():
			return string(evs.StatusOf(r))
		}
		return string(evs.Deliverable)
	}
	for _, tt := range []struct {
		status string
		min    int
	}{
		{"", 0}, {"", 50}, {"", 90}, {"", 100}, {"risky", 20}, {"unknown", 40}, {"undeliverable", 1},
	} {
		// Expected: submission order, filtered by the documented scores.
		var expect []string
		for _, e := range emails {
			if want[e] >= tt.min && (tt.status == "" || status(e) == tt.status) {
				expect = append(expect, e)
			}
		}
		for _, limit := range []int{1, 3, 100} {
			q := url.Values{"minScore": {strconv.Itoa(tt.min)}, "limit": {strconv.Itoa(limit)}}
			if tt.status != "" {
				q.Set("status", tt.status)
			}
			got, pages := resultPages(t, h, id, q)
			var gotEmails []string
			for _, r := range got {
				gotEmails = append(gotEmails, r.Email)
				if *r.Decision.Score < tt.min || tt.status != "" && r.Status != tt.status {
					t.Errorf("%v: %s scored %d (%s)", q, r.Email, *r.Decision.Score, r.Status)
				}
			}
			if strings.Join(gotEmails, ",") != strings.Join(expect, ",") {
				t.Errorf("status %q minScore %d limit %d: got %v, want %v", tt.status, tt.min, limit, gotEmails, expect)
			}
			if limit == 1 && pages < len(expect) {
				t.Errorf("limit 1: %d pages for %d results", pages, len(expect))
			}
		}
		q := url.Values{"minScore": {strconv.Itoa(tt.min)}}
		if tt.status != "" {
			q.Set("status", tt.status)
		}
		cr := h.do(req{path: "/v1/requests/" + id + "/results?" + q.Encode(), key: h.testKey, headers: map[string]string{"Accept": "text/csv"}})
		rows, err := csv.NewReader(strings.NewReader(string(cr.body))).ReadAll()
		if err != nil || cr.status != 200 {
			t.Fatalf("csv %v: %d %v", q, cr.status, err)
		}
		var csvEmails []string
		for _, row := range rows[1:] {
			csvEmails = append(csvEmails, row[0])
		}
		if strings.Join(csvEmails, ",") != strings.Join(expect, ",") {
			t.Errorf("csv %v: got %v, want %v", q, csvEmails, expect)
		}
	}

	// A cursor is valid only with the filters it was made for.
	r := h.do(req{path: "/v1/requests/" + id + "/results?limit=1&minScore=50", key: h.testKey})
	var page struct {
		NextCursor *string `json:"nextCursor"`
	}
	if err := json.Unmarshal(r.body, &page); err != nil || page.NextCursor == nil {
		t.Fatalf("first page: %d %s", r.status, r.body)
	}
	for _, q := range []string{"minScore=60", "", "minScore=0"} {
		r := h.do(req{path: "/v1/requests/" + id + "/results?limit=1&" + q + "&cursor=" + url.QueryEscape(*page.NextCursor), key: h.testKey})
		if r.status != 400 || r.errorCode(t) != "invalid_request" {
			t.Errorf("cursor of minScore=50 with %q: %d %s", q, r.status, r.body)
		}
	}

	for _, bad := range []string{"abc", "-1", "101", "+5", "", "1.5", "50 ", "1e2"} {
		for _, accept := range []string{"application/json", "text/csv"} {
			r := h.do(req{path: "/v1/requests/" + id + "/results?minScore=" + url.QueryEscape(bad), key: h.testKey, headers: map[string]string{"Accept": accept}})
			if r.status != 400 || r.errorCode(t) != "invalid_request" {
				t.Errorf("minScore=%q (%s): %d %s", bad, accept, r.status, r.body)
			}
		}
	}
}

// TestScoreMinScoreEmptyPages: when few results pass, one call reads a
// bounded number (5,000) and answers a page that may be empty, with a
// cursor past what it read; following it reaches the results further on.
func TestScoreMinScoreEmptyPages(t *testing.T) {
	h := start(t, options{realClock: true})
	var emails []string
	for i := 0; i < 5200; i++ {
		emails = append(emails, "u"+strconv.Itoa(i)+"+rejected-email@x.example") // 2
	}
	emails = append(emails, "alice@x.example") // quick: 55
	id := completedBatch(t, h, emails, "quick")
	got, pages := resultPages(t, h, id, url.Values{"minScore": {"50"}, "limit": {"10"}})
	if len(got) != 1 || got[0].Email != "alice@x.example" || pages != 2 {
		t.Fatalf("%d pages, results %+v; want an empty page, then alice@ alone", pages, got)
	}
}
