package verify_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// TestApplyHistory pins the one rule of docs/outcomes.md: which outcomes
// change which verdicts, and the evidence they leave.
func TestApplyHistory(t *testing.T) {
	t.Parallel()
	day := func(n int) time.Time { return time.Date(2026, 11, n, 9, 0, 0, 0, time.UTC) }
	hard := func(n int) evs.Outcome {
		return evs.Outcome{Kind: evs.OutcomeBounced, BounceType: evs.BounceHard, At: day(n), SMTPReply: "550 5.1.1 user unknown"}
	}
	soft := func(n int) evs.Outcome {
		return evs.Outcome{Kind: evs.OutcomeBounced, BounceType: evs.BounceSoft, At: day(n)}
	}
	untyped := func(n int) evs.Outcome { return evs.Outcome{Kind: evs.OutcomeBounced, At: day(n)} }
	delivered := func(n int) evs.Outcome { return evs.Outcome{Kind: evs.OutcomeDelivered, At: day(n)} }
	complained := func(n int) evs.Outcome { return evs.Outcome{Kind: evs.OutcomeComplained, At: day(n)} }
	deferred := func(n int) evs.Outcome { return evs.Outcome{Kind: evs.OutcomeDeferred, At: day(n)} }

	acceptAll := scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPAccepted, "other")
	accepted := scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAccepted, evs.SMTPRejected, "other")
	rejected := scoreDecision(evs.ReasonRejectedEmail, evs.SMTPRejected, "", "other")
	notChecked := scoreDecision(evs.ReasonMailboxNotChecked, evs.SMTPSkipped, "", "other")
	tests := []struct {
		name        string
		d           evs.Decision
		outcomes    []evs.Outcome
		wantReason  evs.Reason
		wantResult  string // "" = no checks.history
		wantAt      time.Time
		wantScore   int
		wantOutcome evs.OutcomeKind
	}{
		{"no outcomes: unchanged", acceptAll, nil, evs.ReasonAcceptAll, "", time.Time{}, 60, ""},
		{"hard bounce on an accept-all address", acceptAll, []evs.Outcome{hard(20)}, evs.ReasonKnownBounce, evs.HistoryKnownBounce, day(20), 1, evs.OutcomeBounced},
		{"hard bounce beats a fresh proven acceptance", accepted, []evs.Outcome{hard(20)}, evs.ReasonKnownBounce, evs.HistoryKnownBounce, day(20), 1, evs.OutcomeBounced},
		{"hard bounce on a quick check", notChecked, []evs.Outcome{hard(20)}, evs.ReasonKnownBounce, evs.HistoryKnownBounce, day(20), 1, evs.OutcomeBounced},
		{"hard bounce after a delivery", acceptAll, []evs.Outcome{delivered(10), hard(20)}, evs.ReasonKnownBounce, evs.HistoryKnownBounce, day(20), 1, evs.OutcomeBounced},
		{"delivery after a hard bounce undoes it", acceptAll, []evs.Outcome{hard(10), delivered(20)}, evs.ReasonAcceptedEmail, evs.HistoryDelivered, day(20), 95, evs.OutcomeDelivered},
		{"the latest of several hard bounces is shown", acceptAll, []evs.Outcome{hard(12), delivered(11), hard(15), hard(13)}, evs.ReasonKnownBounce, evs.HistoryKnownBounce, day(15), 1, evs.OutcomeBounced},
		{"rejected stays rejected, the bounce noted", rejected, []evs.Outcome{hard(20)}, evs.ReasonRejectedEmail, evs.HistoryNoted, day(20), 2, evs.OutcomeBounced},
		{"delivered on an accept-all domain", acceptAll, []evs.Outcome{delivered(20)}, evs.ReasonAcceptedEmail, evs.HistoryDelivered, day(20), 95, evs.OutcomeDelivered},
		{"delivered, proven mailbox: noted, score kept", accepted, []evs.Outcome{delivered(20)}, evs.ReasonAcceptedEmail, evs.HistoryNoted, day(20), 97, evs.OutcomeDelivered},
		{"delivered, not checked: noted", notChecked, []evs.Outcome{delivered(20)}, evs.ReasonMailboxNotChecked, evs.HistoryNoted, day(20), 55, evs.OutcomeDelivered},
		{"soft bounce never undeliverable", acceptAll, []evs.Outcome{soft(20)}, evs.ReasonAcceptAll, evs.HistoryNoted, day(20), 60, evs.OutcomeBounced},
		{"bounce without a type never undeliverable", accepted, []evs.Outcome{untyped(20)}, evs.ReasonAcceptedEmail, evs.HistoryNoted, day(20), 97, evs.OutcomeBounced},
		{"complaint never undeliverable", accepted, []evs.Outcome{complained(20)}, evs.ReasonAcceptedEmail, evs.HistoryNoted, day(20), 97, evs.OutcomeComplained},
		{"deferral never undeliverable", acceptAll, []evs.Outcome{deferred(20)}, evs.ReasonAcceptAll, evs.HistoryNoted, day(20), 60, evs.OutcomeDeferred},
		{"soft bounces after a delivery keep it", acceptAll, []evs.Outcome{delivered(10), soft(20), complained(21)}, evs.ReasonAcceptedEmail, evs.HistoryDelivered, day(10), 95, evs.OutcomeDelivered},
		{"soft bounce after a hard one keeps it", acceptAll, []evs.Outcome{hard(10), soft(20)}, evs.ReasonKnownBounce, evs.HistoryKnownBounce, day(10), 1, evs.OutcomeBounced},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := verify.ApplyHistory(tt.d, verify.History{Outcomes: tt.outcomes})
			if got.Reason != tt.wantReason {
				t.Errorf("reason = %s, want %s", got.Reason, tt.wantReason)
			}
			if s := verify.Score(got); s != tt.wantScore {
				t.Errorf("score = %d, want %d", s, tt.wantScore)
			}
			h := got.Checks.History
			if tt.wantResult == "" {
				if h != nil {
					t.Fatalf("history = %+v, want none", h)
				}
				return
			}
			if h == nil {
				t.Fatal("no checks.history")
			}
			if h.Result != tt.wantResult || !h.At.Equal(tt.wantAt) || h.Outcome != tt.wantOutcome || h.Detail == "" {
				t.Errorf("history = %+v, want result %s, outcome %s at %v", h, tt.wantResult, tt.wantOutcome, tt.wantAt)
			}
			if tt.wantResult == evs.HistoryKnownBounce && (h.SMTPReply == "" || h.BounceType != evs.BounceHard) {
				t.Errorf("known bounce evidence lacks its reply or type: %+v", h)
			}
		})
	}
}

// TestNoHistoryKeepsWireBytes: a decision without outcomes renders exactly
// as before checks.history existed.
func TestNoHistoryKeepsWireBytes(t *testing.T) {
	t.Parallel()
	d := scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPAccepted, "other")
	before, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := json.Marshal(verify.ApplyHistory(d, verify.History{}))
	if string(before) != string(after) {
		t.Fatalf("bytes changed:\n%s\n%s", before, after)
	}
	var m map[string]any
	_ = json.Unmarshal(after, &m)
	if _, ok := m["checks"].(map[string]any)["history"]; ok {
		t.Fatal("checks.history present without outcomes")
	}
}

// TestNoSoftOutcomeIsUndeliverable: whatever mix of soft bounces,
// complaints, deferrals and deliveries, at any times, on any verdict that
// is not already undeliverable, the result never is.
func TestNoSoftOutcomeIsUndeliverable(t *testing.T) {
	t.Parallel()
	kinds := []evs.Outcome{
		{Kind: evs.OutcomeBounced, BounceType: evs.BounceSoft}, {Kind: evs.OutcomeBounced},
		{Kind: evs.OutcomeComplained}, {Kind: evs.OutcomeDeferred}, {Kind: evs.OutcomeDelivered},
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, r := range []evs.Reason{evs.ReasonAcceptAll, evs.ReasonAcceptedEmail, evs.ReasonGreylisted, evs.ReasonMailboxNotChecked, evs.ReasonMailboxFull} {
		for mask := 1; mask < 1<<len(kinds); mask++ {
			var os []evs.Outcome
			for i, k := range kinds {
				if mask&(1<<i) != 0 {
					k.At = base.Add(time.Duration((mask*7+i*3)%11) * time.Hour)
					os = append(os, k)
				}
			}
			got := verify.ApplyHistory(scoreDecision(r, evs.SMTPAccepted, "", "other"), verify.History{Outcomes: os})
			if got.Status() == evs.Undeliverable {
				t.Fatalf("%s with %+v became %s", r, os, got.Reason)
			}
		}
	}
}

// TestDomainCountsMoveTheScore pins docs/score.md's learned rows: the
// domain's counts move an accept-all or unchecked mailbox's score by the
// Beta-smoothed delivery rate, in band, and leave every other verdict and
// the address's own outcomes as they were.
func TestDomainCountsMoveTheScore(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	acceptAll := scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPAccepted, "other")
	yahoo := scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPAccepted, "yahoo")
	notChecked := scoreDecision(evs.ReasonMailboxNotChecked, evs.SMTPSkipped, "", "other")
	accepted := scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAccepted, evs.SMTPRejected, "other")
	greylisted := scoreDecision(evs.ReasonGreylisted, evs.SMTPGreylisted, "", "other")
	roleAcceptAll := acceptAll
	roleAcceptAll.Flags.Role = true
	counts := func(dl, hb int) evs.DomainCounts { return evs.DomainCounts{Delivered: dl, HardBounces: hb} }
	tests := []struct {
		name       string
		d          evs.Decision
		outcomes   []evs.Outcome
		counts     evs.DomainCounts
		wantReason evs.Reason
		wantScore  int
		wantDomain bool // checks.domainHistory present
	}{
		{"no counts: base score", acceptAll, nil, counts(0, 0), evs.ReasonAcceptAll, 60, false},
		// (10×0.60 + 10) / (10 + 10 + 0) = 0.80, kept at the band's top.
		{"all delivered: band's top", acceptAll, nil, counts(10, 0), evs.ReasonAcceptAll, 70, true},
		// (6 + 0) / (10 + 0 + 10) = 0.30.
		{"half the prior's weight of bounces", acceptAll, nil, counts(0, 10), evs.ReasonAcceptAll, 30, true},
		// (6 + 30) / (10 + 30 + 30) = 0.514…
		{"even split", acceptAll, nil, counts(30, 30), evs.ReasonAcceptAll, 51, true},
		// (6 + 0) / (10 + 1000) ≈ 0.006: kept at the band's floor.
		{"all bounced: band's floor", acceptAll, nil, counts(0, 1000), evs.ReasonAcceptAll, 5, true},
		// (6 + 1) / (10 + 1 + 0) = 0.636…: one delivery barely moves it.
		{"one delivery nudges", acceptAll, nil, counts(1, 0), evs.ReasonAcceptAll, 64, true},
		// Yahoo's prior is 45: (4.5 + 5) / (10 + 5 + 5) = 0.475.
		{"the evidence's score is the prior", yahoo, nil, counts(5, 5), evs.ReasonAcceptAll, 48, true},
		// Unchecked with MX: 55. (5.5 + 2) / (10 + 2 + 8) = 0.375.
		{"unchecked mailbox", notChecked, nil, counts(2, 8), evs.ReasonMailboxNotChecked, 38, true},
		{"role: less 10, never below the floor", roleAcceptAll, nil, counts(0, 1000), evs.ReasonAcceptAll, 5, true},
		{"role: less 10", roleAcceptAll, nil, counts(30, 30), evs.ReasonAcceptAll, 41, true},
		{"a proven mailbox ignores them", accepted, nil, counts(0, 50), evs.ReasonAcceptedEmail, 97, false},
		{"a greylisted one too", greylisted, nil, counts(0, 50), evs.ReasonGreylisted, 45, false},
		{"the address's own delivery wins", acceptAll, []evs.Outcome{{Kind: evs.OutcomeDelivered, At: at}}, counts(0, 50),
			evs.ReasonAcceptedEmail, 95, false},
		{"the address's own hard bounce wins", acceptAll, []evs.Outcome{{Kind: evs.OutcomeBounced, BounceType: evs.BounceHard, At: at}},
			counts(50, 0), evs.ReasonKnownBounce, 1, false},
		{"a soft bounce noted, the counts still apply", acceptAll, []evs.Outcome{{Kind: evs.OutcomeBounced, BounceType: evs.BounceSoft, At: at}},
			counts(0, 10), evs.ReasonAcceptAll, 30, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.d
			d.Score = verify.Score(d) // as the engine hands it over
			got := verify.ApplyHistory(d, verify.History{Outcomes: tt.outcomes, Domain: tt.counts, DomainScope: evs.DomainScopeShared})
			if got.Reason != tt.wantReason {
				t.Errorf("reason = %s, want %s", got.Reason, tt.wantReason)
			}
			if got.Score != tt.wantScore || verify.Score(got) != tt.wantScore {
				t.Errorf("score = %d (recomputed %d), want %d", got.Score, verify.Score(got), tt.wantScore)
			}
			dh := got.Checks.DomainHistory
			if (dh != nil) != tt.wantDomain {
				t.Fatalf("checks.domainHistory = %+v, want present %v", dh, tt.wantDomain)
			}
			if dh != nil && (dh.DomainCounts != tt.counts || dh.Scope != evs.DomainScopeShared) {
				t.Errorf("checks.domainHistory = %+v, want %+v shared", dh, tt.counts)
			}
			if got.Status() != tt.d.Status() && tt.outcomes == nil {
				t.Errorf("status %s became %s by the domain's counts alone", tt.d.Status(), got.Status())
			}
		})
	}
	if !verify.UsesDomainCounts(acceptAll) || !verify.UsesDomainCounts(notChecked) || verify.UsesDomainCounts(accepted) {
		t.Error("UsesDomainCounts disagrees with the rule")
	}
	if got := evs.AddressDomain(`"a@b"@Example.com`); got != "Example.com" {
		t.Errorf("Domain = %q", got)
	}
}
