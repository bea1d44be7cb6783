package batch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// fakeHistory answers AddressOutcomes from a map, or with err; it records
// whether the context it was given was already done.
type fakeHistory struct {
	outcomes map[string][]evs.Outcome
	err      error
	ctxDone  bool
}

func (f *fakeHistory) AddressOutcomes(ctx context.Context, _ string, _ []string) (map[string][]evs.Outcome, error) {
	f.ctxDone = ctx.Err() != nil
	return f.outcomes, f.err
}

// TestWithHistory: a step's results get the account's outcomes by the
// one rule; a store fault leaves them as the checks made them; a step cut
// short (its context cancelled) still looks them up, since its results are
// written anyway.
func TestWithHistory(t *testing.T) {
	at := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	results := func() []evs.Result {
		d := evs.Decision{Email: "bob@x.example", Normalized: "bob@x.example", Reason: evs.ReasonAcceptAll,
			Checks: evs.Checks{SMTP: evs.SMTPCheck{Result: evs.SMTPAcceptAll, CatchAll: evs.SMTPAccepted}}}
		inv := evs.Decision{Email: "nope", Reason: evs.ReasonInvalidSyntax}
		return []evs.Result{{Seq: 1, Email: d.Email, Decision: d}, {Seq: 2, Email: "nope", Decision: inv}}
	}
	bounce := map[string][]evs.Outcome{"bob@x.example": {{Address: "bob@x.example", Kind: evs.OutcomeBounced, BounceType: evs.BounceHard, At: at}}}
	b := evs.Batch{ID: "b", AccountID: "a"}

	h := &fakeHistory{outcomes: bounce}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := (&Worker{History: h}).withHistory(ctx, b, results())
	if got[0].Decision.Reason != evs.ReasonKnownBounce || got[0].Decision.Checks.History == nil || got[1].Decision.Reason != evs.ReasonInvalidSyntax {
		t.Errorf("with a hard bounce: %+v", got)
	}
	if h.ctxDone {
		t.Error("the lookup got the step's cancelled context")
	}

	got = (&Worker{History: &fakeHistory{err: errors.New("store down")}}).withHistory(context.Background(), b, results())
	if got[0].Decision.Reason != evs.ReasonAcceptAll || got[0].Decision.Checks.History != nil {
		t.Errorf("after a store fault: %+v", got[0].Decision)
	}
	got = (&Worker{}).withHistory(context.Background(), b, results())
	if got[0].Decision.Reason != evs.ReasonAcceptAll {
		t.Errorf("without a history store: %+v", got[0].Decision)
	}
}
