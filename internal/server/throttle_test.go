package server_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/politeness"
)

// throttleScript answers RCPT for two domains on one mail host: the first
// ask about b@good.example gets a 421 (the server closes on us), every
// listed address is otherwise a mailbox, and anything else (the engine's
// accept-all probe) is unknown. It records each RCPT, and, when paused is
// set, those that came while it said the provider was paused.
type throttleScript struct {
	mu     sync.Mutex
	asked  []string
	paused func() bool
	during []string
}

func (s *throttleScript) reply(addr string) string {
	addr = strings.ToLower(addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	first := true
	for _, a := range s.asked {
		first = first && a != addr
	}
	s.asked = append(s.asked, addr)
	if s.paused != nil && s.paused() {
		s.during = append(s.during, addr)
	}
	switch {
	case addr == "b@good.example" && first:
		return "421 4.7.0 Too many messages from your IP, slow down; closing connection"
	case mailboxes[addr]:
		return "250 2.1.5 OK"
	}
	return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown"
}

// pauseCounter counts the pauses asked of its State.
type pauseCounter struct {
	politeness.State
	pauses atomic.Int32
}

func (p *pauseCounter) Pause(ctx context.Context, key string, now time.Time, length func(int) time.Duration) (time.Time, error) {
	p.pauses.Add(1)
	return p.State.Pause(ctx, key, now, length)
}

var mailboxes = map[string]bool{"a@good.example": true, "b@good.example": true, "c@good.example": true, "x@other.example": true, "y@other.example": true}

// TestBatchThrottledProviderPauses: a 421 in the middle of a session is no
// verdict. The address it answered and the ones the session never asked
// wait for the provider's pause, at the same attempt (not the greylisting
// back-off, an hour here), and end with real answers; the pause holds
// every domain of that provider (other.example shares good.example's mail
// host), so no RCPT reaches the provider until it is over.
func TestBatchThrottledProviderPauses(t *testing.T) {
	const pause = 300 * time.Millisecond
	script := &throttleScript{}
	// The gate keeps its rules in a State the script reads: whether the
	// provider is paused, by the gate's own record and clock, when a RCPT
	// comes.
	state := &pauseCounter{State: politeness.NewMemoryState(nil)}
	gate := &politeness.Gate{State: state, PauseBase: pause, Limits: politeness.Limits{Sessions: map[string]int{"*": 1}}}
	script.paused = func() bool {
		until, _, err := state.PauseState(context.Background(), gate.Key(context.Background(), "good.example"))
		return err == nil && time.Now().Before(until)
	}
	h := start(t, options{
		realClock: true,
		rcpt:      script.reply,
		worker: batch.Worker{GreyBackoff: time.Hour, Processor: &batch.Processor{MaxGreyAttempts: 3},
			// One session at a time, so the throttled session's pause is in
			// place before any other session may open.
			Polite: &batch.Polite{Gate: gate}},
	})
	emails := []string{"a@good.example", "b@good.example", "c@good.example", "x@other.example", "y@other.example"}
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":` + emailsJSON(emails) + `,"mode":"full"}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	final := h.poll(h.liveKey, decodeEnvelope(t, r).Request.ID, 30*time.Second)
	if c := final.Counters; final.Request.State != "completed" || c.Deliverable != 5 {
		t.Fatalf("final: state %s counters %+v, want completed with 5 deliverable", final.Request.State, c)
	}

	script.mu.Lock()
	defer script.mu.Unlock()
	i421 := -1
	for i, a := range script.asked {
		if a == "b@good.example" {
			i421 = i
			break
		}
	}
	if i421 < 0 {
		t.Fatalf("b@good.example was never asked: %v", script.asked)
	}
	if n := state.pauses.Load(); n == 0 {
		t.Fatal("the provider was never paused")
	}
	if len(script.during) != 0 {
		t.Errorf("RCPTs %v came while the provider was paused after the 421 (asked: %v)", script.during, script.asked)
	}
	count := map[string]int{}
	for _, a := range script.asked {
		count[a]++
	}
	for _, e := range emails {
		want := 1
		if e == "b@good.example" {
			want = 2 // the 421, then the answer
		}
		if count[e] != want {
			t.Errorf("%s asked %d times, want %d (asked: %v)", e, count[e], want, script.asked)
		}
	}
}
