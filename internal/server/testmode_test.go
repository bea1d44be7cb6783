package server_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
)

// outcomeAddresses is one address for every reason (the local part, or the
// part after a "+", picks it), and a plain one.
func outcomeAddresses() ([]string, map[string]evs.Reason) {
	want := map[string]evs.Reason{}
	var emails []string
	for i, r := range evs.Reasons() {
		e := string(r) + "@x.example"
		if i%2 == 1 { // every other one as a tag, with '-' between words
			e = "team+" + strings.ReplaceAll(string(r), "_", "-") + "@y.example"
		}
		emails = append(emails, e)
		want[e] = r
	}
	return append(emails, "alice@x.example"), want
}

// TestTestModeBatchEveryOutcome (contract, section 8): a test-mode batch
// holding every outcome address, greylisted@… included, finishes in
// seconds, because every back-off of a test-mode batch is 1 s, although
// the server keeps its live back-off (5 min) and its three attempts; the
// retries still happen (the batch takes at least the two back-offs). Each
// address gets the reason it names, in both modes; the plain one gets what
// a live check would give in that mode.
func TestTestModeBatchEveryOutcome(t *testing.T) {
	t.Parallel()
	h := start(t, options{realClock: true}) // default batch settings: 5 min back-off, 3 attempts
	emails, want := outcomeAddresses()
	for _, mode := range []string{"full", "quick"} {
		// No subtests: the harness fails the test that started it.
		func() {
			r := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":` + emailsJSON(emails) + `,"mode":"` + mode + `"}`})
			if r.status != 201 {
				t.Fatalf("%s: create: %d %s", mode, r.status, r.body)
			}
			id := decodeEnvelope(t, r).Request.ID
			final := h.poll(h.testKey, id, 20*time.Second)
			if final.Request.State != "completed" || final.Counters.Processed != len(emails) {
				t.Fatalf("%s: state %s, counters %+v", mode, final.Request.State, final.Counters)
			}
			// The server's own record of the batch: it ran two back-offs
			// of the test mode's 1 s (three attempts of greylisted@…),
			// none of the live back-off's 5 min.
			created, err1 := time.Parse(time.RFC3339Nano, final.Request.CreatedAt)
			completed, err2 := time.Parse(time.RFC3339Nano, final.Request.CompletedAt)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: timestamps %q %q: %v %v", mode, final.Request.CreatedAt, final.Request.CompletedAt, err1, err2)
			}
			if ran := completed.Sub(created); ran < 2*batch.TestBackoff-100*time.Millisecond || ran >= 5*time.Minute {
				t.Fatalf("%s: the batch ran %v from its creation to its completion; want two back-offs of %v (three attempts of greylisted@…)", mode, ran, batch.TestBackoff)
			}
			plain := evs.ReasonAcceptedEmail
			if mode == "quick" {
				plain = evs.ReasonMailboxNotChecked
			}
			got := testModeResults(t, h, id)
			for _, e := range emails {
				w, ok := want[e]
				if !ok {
					w = plain
				}
				if got[e].Reason != string(w) || !got[e].TestMode {
					t.Errorf("%s (%s): %+v, want %s in test mode", e, mode, got[e], w)
				}
			}
		}()
	}
}

type testModeDecision struct {
	Reason   string `json:"reason"`
	TestMode bool   `json:"testMode"`
	Checks   struct {
		SMTP struct {
			Result string `json:"result"`
			Code   int    `json:"code"`
			Detail string `json:"detail"`
		} `json:"smtp"`
	} `json:"checks"`
}

// testModeResults reads a batch's results: address → decision.
func testModeResults(t *testing.T, h *harness, id string) map[string]testModeDecision {
	t.Helper()
	r := h.do(req{path: "/v1/requests/" + id + "/results?limit=1000", key: h.testKey})
	if r.status != 200 {
		t.Fatalf("results: %d %s", r.status, r.body)
	}
	var page struct {
		Results []struct {
			Email    string           `json:"email"`
			Decision testModeDecision `json:"decision"`
		} `json:"results"`
	}
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatalf("results: %v: %s", err, r.body)
	}
	out := map[string]testModeDecision{}
	for _, res := range page.Results {
		out[res.Email] = res.Decision
	}
	return out
}

// TestTestModeQuickAnswersAsLive (contract, section 8): in quick mode a
// test key answers a plain address as a live key does,
// unknown/mailbox_not_checked with no SMTP result, never a simulated 250;
// the outcome-picking local parts still pick in quick mode, and full mode
// still simulates the probe.
func TestTestModeQuickAnswersAsLive(t *testing.T) {
	h := start(t, options{})
	verify := func(key, email, mode string) (string, testModeDecision) {
		t.Helper()
		r := h.do(req{method: "POST", path: "/v1/verify", key: key, body: `{"email":"` + email + `","mode":"` + mode + `"}`})
		if r.status != 200 {
			t.Fatalf("verify %s %s: %d %s", email, mode, r.status, r.body)
		}
		var v struct {
			Status   string           `json:"status"`
			Decision testModeDecision `json:"decision"`
		}
		if err := json.Unmarshal(r.body, &v); err != nil {
			t.Fatal(err)
		}
		return v.Status, v.Decision
	}
	// What a live key answers in quick mode (good.example has a mail host).
	liveStatus, live := verify(h.liveKey, "carol@good.example", "quick")
	status, d := verify(h.testKey, "carol@good.example", "quick")
	if status != liveStatus || d.Reason != live.Reason || d.Checks.SMTP.Result != live.Checks.SMTP.Result || d.Checks.SMTP.Code != 0 || d.Checks.SMTP.Detail != live.Checks.SMTP.Detail || !d.TestMode {
		t.Fatalf("test key, quick: %s %+v; live key: %s %+v", status, d, liveStatus, live)
	}
	if status != "unknown" || d.Reason != "mailbox_not_checked" {
		t.Fatalf("test key, quick: %s/%s, want unknown/mailbox_not_checked", status, d.Reason)
	}
	for _, c := range []struct{ email, mode, status, reason string }{
		{"carol@x.example", "full", "deliverable", "accepted_email"},
		{"rejected_email@x.example", "quick", "undeliverable", "rejected_email"},
		{"team+mailbox-full@x.example", "quick", "risky", "mailbox_full"},
		{"accepted_email@x.example", "quick", "deliverable", "accepted_email"},
		{"greylisted@x.example", "quick", "unknown", "greylisted"},
		{"carol@mailinator.com", "quick", "risky", "disposable"},
	} {
		if status, d := verify(h.testKey, c.email, c.mode); status != c.status || d.Reason != c.reason || !d.TestMode {
			t.Errorf("%s %s: %s/%s, want %s/%s", c.email, c.mode, status, d.Reason, c.status, c.reason)
		}
	}
}
