package verify_test

import (
	"math/rand/v2"
	"testing"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// scoreDecision builds a decision with the evidence a live check leaves for
// reason: DNS found one MX host of provider, and smtp is the SMTP result.
func scoreDecision(reason evs.Reason, smtp, catchAll, provider string) evs.Decision {
	return evs.Decision{
		Reason: reason,
		Checks: evs.Checks{
			Syntax: evs.SyntaxCheck{Valid: reason != evs.ReasonInvalidSyntax},
			DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{"mx.example"}},
			SMTP:   evs.SMTPCheck{Result: smtp, CatchAll: catchAll, Provider: evs.Provider(provider)},
		},
	}
}

// TestScoreTable pins every row of docs/score.md: each reason of the contract
// with the evidence variants that change its score, and the flags.
func TestScoreTable(t *testing.T) {
	t.Parallel()
	role := func(d evs.Decision) evs.Decision { d.Flags.Role = true; return d }
	free := func(d evs.Decision) evs.Decision { d.Flags.Free = true; return d }
	dns := func(d evs.Decision, c evs.DNSCheck) evs.Decision { d.Checks.DNS = c; return d }
	delivered := func(d evs.Decision) evs.Decision {
		d.Checks.History = &evs.HistoryCheck{Result: evs.HistoryDelivered, Outcome: evs.OutcomeDelivered}
		return d
	}
	notChecked := scoreDecision(evs.ReasonMailboxNotChecked, evs.SMTPSkipped, "", "other")
	tests := []struct {
		name string
		d    evs.Decision
		want int
	}{
		{"accepted, random address rejected", scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAccepted, evs.SMTPRejected, "other"), 97},
		{"accepted, random address greylisted", scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAccepted, evs.SMTPGreylisted, "other"), 90},
		{"accepted, random address timed out", scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAccepted, evs.SMTPTimeout, "google"), 90},
		{"accepted, probe not on record", scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAccepted, "", "other"), 90},
		{"accepted, role mailbox", role(scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAccepted, evs.SMTPRejected, "other")), 87},
		{"accepted, unproven, role mailbox", role(scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAccepted, "", "other")), 80},
		{"accepted, free provider", free(scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAccepted, evs.SMTPRejected, "google")), 97},

		{"accept-all: random address accepted", scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPAccepted, "other"), 60},
		{"accept-all: gateway, random address accepted", scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPAccepted, "mimecast"), 60},
		{"accept-all: gateway, probe greylisted", scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPGreylisted, "mimecast"), 55},
		{"accept-all: gateway, probe timed out", scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPTimeout, "proofpoint"), 55},
		{"accept-all: Yahoo accepts then bounces", scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPRejected, "yahoo"), 45},
		{"accept-all: Yahoo, random address accepted", scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPAccepted, "yahoo"), 45},
		{"accept-all, role mailbox", role(scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPAccepted, "other")), 50},
		{"mailbox full", scoreDecision(evs.ReasonMailboxFull, evs.SMTPFull, "", "other"), 25},
		{"disposable, not probed", scoreDecision(evs.ReasonDisposable, evs.SMTPSkipped, "", "other"), 15},
		{"disposable, accepted", scoreDecision(evs.ReasonDisposable, evs.SMTPAccepted, evs.SMTPRejected, "other"), 15},
		{"disposable, role mailbox", role(scoreDecision(evs.ReasonDisposable, evs.SMTPSkipped, "", "other")), 5},

		{"greylisted", scoreDecision(evs.ReasonGreylisted, evs.SMTPGreylisted, "", "other"), 45},
		{"timeout", scoreDecision(evs.ReasonTimeout, evs.SMTPTimeout, "", "other"), 35},
		{"smtp unreachable", scoreDecision(evs.ReasonSMTPUnreachable, evs.SMTPUnreachable, "", "other"), 30},
		{"dns error", dns(scoreDecision(evs.ReasonDNSError, evs.SMTPSkipped, "", ""), evs.DNSCheck{Result: evs.DNSError}), 20},
		{"dns error, role mailbox", role(dns(scoreDecision(evs.ReasonDNSError, evs.SMTPSkipped, "", ""), evs.DNSCheck{Result: evs.DNSError})), 10},
		{"not checked, MX records, unknown provider", notChecked, 55},
		{"not checked, MX records, known provider", scoreDecision(evs.ReasonMailboxNotChecked, evs.SMTPSkipped, "", "google"), 60},
		{"not checked, implicit MX", dns(notChecked, evs.DNSCheck{Result: evs.DNSOK, MX: []string{"d.example"}, ImplicitMX: true}), 35},
		{"not checked, DNS not run", dns(scoreDecision(evs.ReasonMailboxNotChecked, evs.SMTPSkipped, "", ""), evs.DNSCheck{Result: evs.DNSNotChecked}), 35},
		{"not checked, role mailbox", role(notChecked), 45},

		{"blocked: a live server refused us", scoreDecision(evs.ReasonBlocked, evs.SMTPUnreachable, "", "other"), 40},
		{"ambiguous reply from a live server", scoreDecision(evs.ReasonAmbiguousReply, evs.SMTPUnreachable, "", "other"), 40},
		{"rejected", scoreDecision(evs.ReasonRejectedEmail, evs.SMTPRejected, "", "other"), 2},
		{"known bounce", scoreDecision(evs.ReasonKnownBounce, evs.SMTPAcceptAll, evs.SMTPAccepted, "other"), 1},
		{"known bounce, role mailbox", role(scoreDecision(evs.ReasonKnownBounce, evs.SMTPAccepted, evs.SMTPRejected, "other")), 1},
		{"accept-all address delivered on record", delivered(scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAcceptAll, evs.SMTPAccepted, "yahoo")), 95},
		{"delivered on record, role mailbox", role(delivered(scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAcceptAll, evs.SMTPAccepted, "other"))), 85},
		{"rejected, role mailbox", role(scoreDecision(evs.ReasonRejectedEmail, evs.SMTPRejected, "", "other")), 2},
		{"no mail server", dns(scoreDecision(evs.ReasonNoMailServer, evs.SMTPSkipped, "", ""), evs.DNSCheck{Result: evs.DNSNullMX}), 1},
		{"mx not public", dns(scoreDecision(evs.ReasonNoMailServer, evs.SMTPSkipped, "", "other"), evs.DNSCheck{Result: evs.DNSMXNotPublic}), 1},
		{"invalid domain", dns(scoreDecision(evs.ReasonInvalidDomain, evs.SMTPSkipped, "", ""), evs.DNSCheck{Result: evs.DNSNXDomain}), 1},
		{"invalid syntax", scoreDecision(evs.ReasonInvalidSyntax, evs.SMTPSkipped, "", ""), 0},
	}
	seen := map[evs.Reason]bool{}
	for _, tt := range tests {
		seen[tt.d.Reason] = true
		t.Run(tt.name, func(t *testing.T) {
			if got := verify.Score(tt.d); got != tt.want {
				t.Errorf("Score = %d, want %d", got, tt.want)
			}
		})
	}
	for _, r := range evs.Reasons() {
		if !seen[r] {
			t.Errorf("reason %s has no row", r)
		}
	}
}

// TestScoreRespectsStatus: over many decisions with random evidence, every
// score lies in its status's band, the bands order the statuses
// (deliverable above risky and unknown, those above undeliverable), and
// the same evidence gives the same score.
func TestScoreRespectsStatus(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(22, 1))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	smtps := []string{evs.SMTPAccepted, evs.SMTPRejected, evs.SMTPAcceptAll, evs.SMTPFull, evs.SMTPGreylisted,
		evs.SMTPUnreachable, evs.SMTPTimeout, evs.SMTPSkipped, ""}
	dnss := []string{evs.DNSOK, evs.DNSNXDomain, evs.DNSNullMX, evs.DNSNoRecords, evs.DNSError, evs.DNSNotChecked, evs.DNSMXNotPublic}
	providers := []string{"", "other", "google", "yahoo", "mimecast", "proofpoint", "microsoft365", "unheard-of"}
	reasons := evs.Reasons()
	lo := map[evs.Status]int{}
	hi := map[evs.Status]int{}
	for i := 0; i < 20000; i++ {
		d := evs.Decision{
			Reason: reasons[rng.IntN(len(reasons))],
			Mode:   []evs.Mode{evs.ModeFull, evs.ModeQuick}[rng.IntN(2)],
			Flags: evs.Flags{Disposable: rng.IntN(2) == 0, Role: rng.IntN(2) == 0, Free: rng.IntN(2) == 0,
				AcceptAll: rng.IntN(2) == 0, SMTPUTF8: rng.IntN(2) == 0},
			Checks: evs.Checks{
				DNS:  evs.DNSCheck{Result: pick(dnss), MX: []string{"mx.example"}[:rng.IntN(2)], ImplicitMX: rng.IntN(2) == 0},
				SMTP: evs.SMTPCheck{Result: pick(smtps), CatchAll: pick(smtps), Provider: evs.Provider(pick(providers))},
			},
			TestMode: rng.IntN(2) == 0,
		}
		if rng.IntN(2) == 0 {
			// Learned counts, from none to lopsided ones either way.
			n := []int{0, 1, 5, 100, 100000}
			d.Checks.DomainHistory = &evs.DomainHistoryCheck{Scope: evs.DomainScopeAccount, DomainCounts: evs.DomainCounts{
				Delivered: n[rng.IntN(len(n))], HardBounces: n[rng.IntN(len(n))]}}
		}
		s := verify.Score(d)
		if again := verify.Score(d); again != s {
			t.Fatalf("%+v scored %d then %d", d, s, again)
		}
		st := d.Status()
		band := verify.ScoreBands[st]
		if s < band[0] || s > band[1] {
			t.Fatalf("%+v (%s) scored %d, outside its band %v", d, st, s, band)
		}
		if _, ok := lo[st]; !ok || s < lo[st] {
			lo[st] = s
		}
		hi[st] = max(hi[st], s)
	}
	for _, mid := range []evs.Status{evs.Risky, evs.Unknown} {
		if hi[evs.Undeliverable] >= lo[mid] {
			t.Errorf("an undeliverable address scored %d, a %s one %d", hi[evs.Undeliverable], mid, lo[mid])
		}
		if hi[mid] >= lo[evs.Deliverable] {
			t.Errorf("a %s address scored %d, a deliverable one %d", mid, hi[mid], lo[evs.Deliverable])
		}
	}
	t.Logf("observed ranges: low %v, high %v", lo, hi)
}

// BenchmarkScore: the score is recomputed for every result a page or CSV
// renders, so it must cost next to nothing beside the decision's decoding.
func BenchmarkScore(b *testing.B) {
	ds := []evs.Decision{
		scoreDecision(evs.ReasonAcceptedEmail, evs.SMTPAccepted, evs.SMTPRejected, "google"),
		scoreDecision(evs.ReasonAcceptAll, evs.SMTPAcceptAll, evs.SMTPGreylisted, "mimecast"),
		scoreDecision(evs.ReasonMailboxNotChecked, evs.SMTPSkipped, "", "other"),
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = verify.Score(ds[i%len(ds)])
	}
}
