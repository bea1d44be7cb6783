package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/testkit"
)

// rcptScript answers RCPT as a greylisting server would and counts the
// attempts per address. The SMTP server calls it from several connections
// at once.
type rcptScript struct {
	mu    sync.Mutex
	calls map[string]int
}

const greylistReply = "450 4.2.0 Greylisted, try again later"

func (s *rcptScript) reply(addr string) string {
	s.mu.Lock()
	s.calls[strings.ToLower(addr)]++
	n := s.calls[strings.ToLower(addr)]
	s.mu.Unlock()
	switch {
	case strings.EqualFold(addr, "alice@good.example"):
		// Greylisting proper: the first try is deferred, a later one passes.
		if n == 1 {
			return greylistReply
		}
		return "250 2.1.5 OK"
	case strings.EqualFold(addr, "bob@good.example"):
		return greylistReply
	default:
		// Everyone else, including the engine's "evs-..." accept-all probe,
		// is unknown: the domain is not accept-all.
		return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown"
	}
}

func (s *rcptScript) count(addr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[addr]
}

type greyWant struct {
	email, status, reason string
	attempts              int
}

// TestBatchGreylistRetried: in a live batch, a greylisted answer before the
// last attempt gives no result; the address is retried after the back-off,
// so an address greylisted once ends deliverable, and one greylisted every
// time ends unknown/greylisted after exactly MaxGreyAttempts tries.
func TestBatchGreylistRetried(t *testing.T) {
	cases := []struct {
		name     string
		maxGrey  int
		counters [4]int // deliverable, undeliverable, risky, unknown
		want     []greyWant
	}{
		{"three attempts", 3, [4]int{1, 1, 0, 1}, []greyWant{
			{"alice@good.example", "deliverable", "accepted_email", 2},
			{"bob@good.example", "unknown", "greylisted", 3},
			{"carol@good.example", "undeliverable", "rejected_email", 1},
		}},
		// With one attempt the first greylisted answer is final: nothing is
		// retried, even for an address that would pass a second time.
		{"one attempt", 1, [4]int{0, 1, 0, 2}, []greyWant{
			{"alice@good.example", "unknown", "greylisted", 1},
			{"bob@good.example", "unknown", "greylisted", 1},
			{"carol@good.example", "undeliverable", "rejected_email", 1},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testGreylist(t, tc.maxGrey, tc.counters, tc.want)
		})
	}
}

func testGreylist(t *testing.T, maxGrey int, counters [4]int, want []greyWant) {
	script := &rcptScript{calls: map[string]int{}}
	h := start(t, options{
		realClock: true,
		rcpt:      script.reply,
		worker:    batch.Worker{GreyBackoff: 20 * time.Millisecond, Processor: &batch.Processor{MaxGreyAttempts: maxGrey}},
	})
	emails := []string{"alice@good.example", "bob@good.example", "carol@good.example"}
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":` + emailsJSON(emails) + `,"mode":"full"}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID
	final := h.poll(h.liveKey, id, 30*time.Second)
	c := final.Counters
	if final.Request.State != "completed" || c.Processed != 3 || [4]int{c.Deliverable, c.Undeliverable, c.Risky, c.Unknown} != counters {
		t.Fatalf("final: state %s counters %+v, want completed with d/u/r/u %v", final.Request.State, c, counters)
	}

	rr := h.do(req{path: "/v1/requests/" + id + "/results", key: h.liveKey})
	if rr.status != 200 {
		t.Fatalf("results: %d %s", rr.status, rr.body)
	}
	var page struct {
		Results []struct {
			Email    string `json:"email"`
			Status   string `json:"status"`
			Decision struct {
				Reason string `json:"reason"`
				Checks struct {
					SMTP struct {
						Result string `json:"result"`
						Code   int    `json:"code"`
					} `json:"smtp"`
				} `json:"checks"`
			} `json:"decision"`
		} `json:"results"`
	}
	if err := json.Unmarshal(rr.body, &page); err != nil {
		t.Fatalf("results: %v: %s", err, rr.body)
	}
	if len(page.Results) != len(want) {
		t.Fatalf("%d results, want %d: %s", len(page.Results), len(want), rr.body)
	}
	for i, w := range want {
		got := page.Results[i]
		if got.Email != w.email || got.Status != w.status || got.Decision.Reason != w.reason {
			t.Errorf("result %d: %s %s/%s, want %s %s/%s", i, got.Email, got.Status, got.Decision.Reason, w.email, w.status, w.reason)
		}
		if n := script.count(w.email); n != w.attempts {
			t.Errorf("%s: %d RCPT attempts, want %d", w.email, n, w.attempts)
		}
		// A final greylisted verdict carries the server's 4xx, not a guess.
		if w.reason == "greylisted" && (got.Decision.Checks.SMTP.Result != "greylisted" || got.Decision.Checks.SMTP.Code != 450) {
			t.Errorf("%s smtp check: %+v", w.email, got.Decision.Checks.SMTP)
		}
	}
}

// TestShutdownDuringGreylistBackoff: a graceful stop does not wait out a
// greylist back-off (minutes in production). The waiting addresses stay
// pending in the store, and the next start finishes the batch.
func TestShutdownDuringGreylistBackoff(t *testing.T) {
	dir := t.TempDir()
	script := &rcptScript{calls: map[string]int{}}
	h := start(t, options{realClock: true, dir: dir, rcpt: script.reply,
		worker: batch.Worker{GreyBackoff: time.Hour, Processor: &batch.Processor{MaxGreyAttempts: 3}}})
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":["bob@good.example","carol@good.example"],"mode":"full"}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID
	// Wait until carol's result is in and bob is waiting for his retry.
	testkit.Eventually(t, 30*time.Second, func() error {
		e := decodeEnvelope(t, h.do(req{path: "/v1/requests/" + id, key: h.liveKey}))
		if e.Counters.Processed == 1 && script.count("bob@good.example") == 1 {
			return nil
		}
		return fmt.Errorf("batch never reached the back-off: %+v", e.Counters)
	})
	// stop fails the test if the server has not stopped within 30 s; before
	// the runner watched its context here, it waited the whole hour.
	h.stop()
	h.st.Close()

	// The next start has one attempt left to give: bob ends greylisted.
	h2 := start(t, options{realClock: true, dir: dir, rcpt: script.reply,
		worker: batch.Worker{GreyBackoff: 10 * time.Millisecond, Processor: &batch.Processor{MaxGreyAttempts: 1}}})
	final := h2.poll(h.liveKey, id, 30*time.Second)
	if c := final.Counters; final.Request.State != "completed" || c.Processed != 2 || c.Unknown != 1 || c.Undeliverable != 1 {
		t.Fatalf("after restart: %s %+v", final.Request.State, c)
	}
}
