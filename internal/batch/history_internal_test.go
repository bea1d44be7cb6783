package batch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// fakeHistory answers AddressOutcomes and DomainCounts from maps, or
// with err (countsErr for the counts); it records whether the context it
// was given was already done, and the domains and scope asked for.
type fakeHistory struct {
	outcomes  map[string][]evs.Outcome
	counts    map[string]evs.DomainCounts
	err       error
	countsErr error
	ctxDone   bool
	domains   []string
	shared    bool
}

func (f *fakeHistory) DomainCounts(_ context.Context, _ string, domains []string, shared bool) (map[string]evs.DomainCounts, error) {
	f.domains, f.shared = domains, shared
	return f.counts, f.countsErr
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
	t.Parallel()
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

// TestWithHistoryDomainCounts: a step's accept-all and unchecked results
// get their domains' counts, looked up once per domain, in the scope the
// operator chose; other results and their domains are left alone; a fault
// reading the counts still applies the addresses' own outcomes.
func TestWithHistoryDomainCounts(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	dec := func(addr string, r evs.Reason, smtp string) evs.Decision {
		return evs.Decision{Email: addr, Normalized: addr, Reason: r,
			Checks: evs.Checks{DNS: evs.DNSCheck{Result: evs.DNSOK, MX: []string{"mx"}}, SMTP: evs.SMTPCheck{Result: smtp, CatchAll: evs.SMTPAccepted}}}
	}
	results := func() []evs.Result {
		return []evs.Result{
			{Seq: 1, Decision: dec("ann@catchall.example", evs.ReasonAcceptAll, evs.SMTPAcceptAll)},
			{Seq: 2, Decision: dec("bob@catchall.example", evs.ReasonAcceptAll, evs.SMTPAcceptAll)},
			{Seq: 3, Decision: dec("cy@proven.example", evs.ReasonAcceptedEmail, evs.SMTPAccepted)},
			{Seq: 4, Decision: dec("dee@quick.example", evs.ReasonMailboxNotChecked, evs.SMTPSkipped)},
		}
	}
	b := evs.Batch{ID: "b", AccountID: "a"}
	h := &fakeHistory{
		outcomes: map[string][]evs.Outcome{"bob@catchall.example": {{Address: "bob@catchall.example", Kind: evs.OutcomeBounced, BounceType: evs.BounceHard, At: at}}},
		counts: map[string]evs.DomainCounts{"catchall.example": {HardBounces: 10}, "quick.example": {Delivered: 10},
			"proven.example": {HardBounces: 100}},
	}
	got := (&Worker{History: h, ShareDomainCounts: true}).withHistory(context.Background(), b, results())
	if len(h.domains) != 2 || h.domains[0] != "catchall.example" || h.domains[1] != "quick.example" || !h.shared {
		t.Errorf("asked for the counts of %v (shared %v), want catchall.example and quick.example, shared", h.domains, h.shared)
	}
	if d := got[0].Decision; d.Checks.DomainHistory == nil || d.Checks.DomainHistory.Scope != evs.DomainScopeShared || d.Score != 30 {
		t.Errorf("ann: %+v, score %d; want the shared counts and 30", d.Checks.DomainHistory, d.Score)
	}
	if d := got[1].Decision; d.Reason != evs.ReasonKnownBounce || d.Checks.DomainHistory != nil {
		t.Errorf("bob: %s with %+v; want known_bounce without domain counts", d.Reason, d.Checks.DomainHistory)
	}
	if d := got[2].Decision; d.Checks.DomainHistory != nil || d.Checks.History != nil {
		t.Errorf("a proven mailbox got evidence: %+v", d.Checks)
	}
	if d := got[3].Decision; d.Checks.DomainHistory == nil || d.Score != 70 {
		t.Errorf("dee: %+v, score %d; want the counts and 70", d.Checks.DomainHistory, d.Score)
	}

	h.countsErr = errors.New("store down")
	got = (&Worker{History: h}).withHistory(context.Background(), b, results())
	if got[0].Decision.Checks.DomainHistory != nil || got[1].Decision.Reason != evs.ReasonKnownBounce {
		t.Errorf("after a fault reading the counts: %+v / %s", got[0].Decision.Checks.DomainHistory, got[1].Decision.Reason)
	}
	if h.shared {
		t.Error("asked for shared counts with sharing off")
	}
}
