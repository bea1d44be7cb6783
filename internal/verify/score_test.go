package verify_test

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// TestEngineScores: every decision the engine returns carries the score of
// docs/score.md for its evidence, from Verify and VerifyDomain alike, and
// an accepted mailbox records the random-address probe that proved it.
func TestEngineScores(t *testing.T) {
	t.Parallel()
	w := newWorld(t, reasonMTAs(), reasonRecords, 400*time.Millisecond)
	w.dns.SetRcode(reasonServFail, dns.RcodeServerFailure)
	tests := []struct {
		email, mode string
		score       int
		catchAll    string
	}{
		{"alice@corp.example", "full", 97, evs.SMTPRejected},
		{"alice@implicit.example", "full", 97, evs.SMTPRejected},
		{"anyone@catchall.example", "full", 60, evs.SMTPAccepted},
		{"x@mailinator.com", "full", 15, evs.SMTPAccepted},
		{"full@corp.example", "full", 25, ""},
		{"grey@corp.example", "full", 45, ""},
		{"a@silent.example", "full", 35, ""},
		{"blocked@corp.example", "full", 40, ""},
		{"a@servfail.example", "full", 20, ""},
		{"nobody@corp.example", "full", 2, ""},
		{"a@nullmx.example", "full", 1, ""},
		{"a@missing.example", "full", 1, ""},
		{"a..b@corp.example", "full", 0, ""},
		{"alice@corp.example", "quick", 55, ""},
		{"alice@implicit.example", "quick", 35, ""},
		{"postmaster@corp.example", "quick", 45, ""},
	}
	for _, tt := range tests {
		t.Run(tt.email+"/"+tt.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			d := w.engine.Verify(ctx, verify.Inspect(tt.email), evs.Mode(tt.mode))
			if d.Score != tt.score || d.Checks.SMTP.CatchAll != tt.catchAll {
				t.Fatalf("%s (%s): score %d catchAll %q, want %d %q", d.Reason, d.Checks.SMTP.Detail, d.Score, d.Checks.SMTP.CatchAll, tt.score, tt.catchAll)
			}
			if g := verify.Score(d); g != d.Score {
				t.Fatalf("recomputed from the evidence: %d, carried: %d", g, d.Score)
			}
		})
	}
	t.Run("VerifyDomain", func(t *testing.T) {
		ds := w.engine.VerifyDomain(context.Background(), []string{"alice@corp.example", "nobody@corp.example", "grey@corp.example"}, evs.ModeFull)
		for i, want := range []int{97, 2, 45} {
			if ds[i].Score != want {
				t.Errorf("%s: score %d, want %d", ds[i].Email, ds[i].Score, want)
			}
		}
	})
	t.Run("sandbox", func(t *testing.T) {
		sb := verify.NewSandbox(nil)
		for email, want := range map[string]int{"accepted_email@x.example": 97, "accept_all@x.example": 60, "admin@x.example": 87, "greylisted@x.example": 45} {
			if d := sb.Verify(context.Background(), verify.Inspect(email), evs.ModeFull); d.Score != want {
				t.Errorf("sandbox %s: score %d, want %d", email, d.Score, want)
			}
		}
	})
}
