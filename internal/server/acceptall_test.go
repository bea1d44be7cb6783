package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
)

// TestAcceptAllUnknown: a mailbox the server accepts, on a server whose
// random-address probe is greylisted, is not shown to reject unknown
// addresses: risky/accept_all, with the 250 as the evidence, the probe's
// answer in catchAll and acceptAll null (an empty CSV cell) — the same
// from /v1/verify and from a batch, read back from the store, where the
// probe was asked again in a later session first.
func TestAcceptAllUnknown(t *testing.T) {
	h := start(t, options{rcpt: func(addr string) string {
		switch {
		case strings.HasPrefix(addr, "alice@"):
			return "250 2.1.5 OK"
		case strings.HasPrefix(addr, "bob@"):
			return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown in virtual mailbox table"
		}
		return "451 4.7.1 <" + addr + ">: Recipient address rejected: Greylisted, try again later"
	}, worker: batch.Worker{GreyBackoff: 20 * time.Millisecond, Processor: &batch.Processor{MaxGreyAttempts: 3}}})
	check := func(what string, d map[string]any) {
		t.Helper()
		smtp, _ := d["checks"].(map[string]any)["smtp"].(map[string]any)
		flags, _ := d["flags"].(map[string]any)
		aa, present := flags["acceptAll"]
		if d["reason"] != "accept_all" || smtp["result"] != "accepted" || smtp["catchAll"] != "greylisted" || !present || aa != nil {
			t.Fatalf("%s: reason %v, smtp %v, flags %v; want accept_all, accepted, catchAll greylisted, acceptAll null", what, d["reason"], smtp, flags)
		}
		if s, _ := d["score"].(float64); s != 65 {
			t.Errorf("%s: score %v, want 65", what, d["score"])
		}
	}
	r := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"alice@good.example"}`})
	if r.status != 200 || r.json(t)["status"] != "risky" {
		t.Fatalf("verify: %d %s", r.status, r.body)
	}
	check("/v1/verify", r.json(t)["decision"].(map[string]any))

	got := h.fullBatch(h.liveKey, []string{"alice@other.example", "bob@other.example"}, "", time.Minute)
	check("batch", got["alice@other.example"])
	if flags := got["bob@other.example"]["flags"].(map[string]any); flags["acceptAll"] != false {
		t.Errorf("a rejected mailbox's acceptAll: %v, want false", flags["acceptAll"])
	}
}
