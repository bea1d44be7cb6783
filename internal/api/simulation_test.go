package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/verify"
)

// The outcome simulation of issue 38 (docs/outcomes.md, "The
// simulation"): 20,000 addresses over 200 domains, a third of them
// accept-all with a hidden share of real mailboxes, the rest checking
// recipients; outcomes posted for half the addresses. The decisions come
// from the sandbox engine, which builds its evidence like a live check
// (docs/score.md, "Test mode"), marked live as the account's result cache
// keeps live ones; the outcomes go through the handler's own functions
// (storeOutcomes, verify.WithHistory, buildOutcomesReport) into a real
// SQLite store. Not HTTP: 20,000 round trips would make it slow for
// nothing the server tests do not already cover.
const (
	simDomains          = 200
	simAddressesPerDom  = 100
	simAcceptAllEvery   = 3 // every third domain is accept-all
	simAccount          = "sim"
	simAccountUniform   = "sim-uniform"
	simBrierGoal        = 2.0 / 3 // at least a third lower than without outcomes
	simNotVerifiedShare = 0.05    // sent addresses the account never verified first
)

// simAddr is one simulated address and what really happens to mail sent
// to it.
type simAddr struct {
	email, key string
	acceptAll  bool
	real       bool // the hidden truth: a mailbox that receives mail
	sent       bool // in the half whose outcomes are posted
	verified   bool // the account verified it before sending
	outcomes   []evs.Outcome
}

// simFigures are what one run measured.
type simFigures struct {
	// hardBounced: hard-bounced addresses the checks did not find
	// undeliverable (accept-all ones); knownBounce: those answered
	// known_bounce. rejectedBounced: hard-bounced addresses the checks
	// rejected; rejectedKept: those still rejected_email, the bounce
	// noted (ApplyHistory rule 1).
	hardBounced, knownBounce         int
	rejectedBounced, rejectedKept    int
	deliveredAcceptAll, nowDelivered int
	softOnly, turnedUndeliverable    int
	deliveredSoft                    int     // delivered, and a soft bounce or complaint after
	brierBefore, brierAfter          float64 // unsent accept-all addresses
	brierAllBefore, brierAllAfter    float64 // every unsent address
	unsentAcceptAll, unsent          int
}

// share draws a domain's hidden share of real mailboxes.
type shareDist func(rng *rand.Rand) float64

// mixedShares: most accept-all domains on a real list are live
// organisations whose collected addresses are mostly real (75–100 %), a
// third are abandoned or junk domains where most are not (0–35 %).
func mixedShares(rng *rand.Rand) float64 {
	if rng.IntN(3) == 0 {
		return 0.35 * rng.Float64()
	}
	return 0.75 + 0.25*rng.Float64()
}

// uniformShares: every share from 15 % to 95 % as likely; a harder case,
// run to show how the gain depends on how much the domains differ.
func uniformShares(rng *rand.Rand) float64 { return 0.15 + 0.8*rng.Float64() }

func TestOutcomeSimulation(t *testing.T) {
	// The two runs, each in an account and a store of its own, side by
	// side: one is minutes of SQLite under the race detector.
	t.Run("mixed shares", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		h, st, clock := newSimulation(t, ctx)
		start := time.Now()
		f, addrs := runSimulation(t, ctx, h, st, clock, simAccount, mixedShares, 38)
		t.Logf("simulation (mixed shares): Brier score of score/100 on the %d unsent accept-all addresses: %.4f without outcomes, %.4f with (%.0f %% lower); on the %d unsent addresses: %.4f, %.4f",
			f.unsentAcceptAll, f.brierBefore, f.brierAfter, 100*(1-f.brierAfter/f.brierBefore), f.unsent, f.brierAllBefore, f.brierAllAfter)
		t.Logf("simulation (mixed shares): %d/%d hard-bounced accept-all addresses known_bounce (and %d/%d hard-bounced rejected ones still rejected_email, the bounce noted); %d/%d delivered accept-all addresses deliverable; %d of the %d real addresses with a soft bounce, deferral or complaint (%d never delivered to, %d delivered to first) turned undeliverable",
			f.knownBounce, f.hardBounced, f.rejectedKept, f.rejectedBounced, f.nowDelivered, f.deliveredAcceptAll, f.turnedUndeliverable, f.softOnly+f.deliveredSoft, f.softOnly, f.deliveredSoft)
		if f.hardBounced == 0 || f.knownBounce != f.hardBounced || f.rejectedBounced == 0 || f.rejectedKept != f.rejectedBounced {
			t.Errorf("%d of %d hard-bounced addresses came back known_bounce, %d of %d rejected ones kept: want every one",
				f.knownBounce, f.hardBounced, f.rejectedKept, f.rejectedBounced)
		}
		if f.deliveredAcceptAll == 0 || f.nowDelivered != f.deliveredAcceptAll {
			t.Errorf("%d of %d delivered accept-all addresses came back deliverable, want every one", f.nowDelivered, f.deliveredAcceptAll)
		}
		if f.softOnly == 0 || f.turnedUndeliverable != 0 {
			t.Errorf("%d of %d addresses with soft outcomes only turned undeliverable, want 0", f.turnedUndeliverable, f.softOnly)
		}
		if f.brierAfter > simBrierGoal*f.brierBefore {
			t.Errorf("Brier score %.4f with outcomes, %.4f without: want at least a third lower", f.brierAfter, f.brierBefore)
		}
		checkSimReport(t, ctx, st, simAccount, addrs)
		t.Logf("simulation took %v", time.Since(start).Round(time.Millisecond))
	})

	// The same with evenly spread shares, in an account of its own (the
	// counts are per account): better, though by less.
	t.Run("uniform shares", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		h, st, clock := newSimulation(t, ctx)
		start := time.Now()
		u, _ := runSimulation(t, ctx, h, st, clock, simAccountUniform, uniformShares, 39)
		t.Logf("simulation (uniform shares): Brier score on the %d unsent accept-all addresses: %.4f without outcomes, %.4f with (%.0f %% lower)",
			u.unsentAcceptAll, u.brierBefore, u.brierAfter, 100*(1-u.brierAfter/u.brierBefore))
		if u.brierAfter >= u.brierBefore || u.knownBounce != u.hardBounced || u.turnedUndeliverable != 0 {
			t.Errorf("uniform shares: %+v", u)
		}
		t.Logf("simulation took %v", time.Since(start).Round(time.Millisecond))
	})
}

// newSimulation opens a store on a clock of its own, at the simulation's
// start, and a handler on it.
func newSimulation(t *testing.T, ctx context.Context) (*Handler, *sqlitestore.Store, *time.Time) {
	t.Helper()
	clock := new(time.Time)
	*clock = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return *clock }
	st, err := sqlitestore.Open(ctx, t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &Handler{d: Deps{Outcomes: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: now}}, st, clock
}

// runSimulation makes the addresses and their truth from seed, has the
// account verify and send, posts the outcomes, verifies every address
// again and measures.
func runSimulation(t *testing.T, ctx context.Context, h *Handler, st *sqlitestore.Store, clock *time.Time, account string,
	shares shareDist, seed uint64) (simFigures, []*simAddr) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 38))
	sandbox := verify.NewSandbox(func() time.Time { return *clock })
	verifyLive := func(a *simAddr) evs.Decision {
		d := sandbox.Verify(ctx, verify.Inspect(a.email), evs.ModeFull)
		d.TestMode = false // a stand-in for a live check, kept as one
		return d
	}

	var addrs []*simAddr
	for i := range simDomains {
		domain := fmt.Sprintf("d%03d.example", i)
		acceptAll := i%simAcceptAllEvery == 0
		share := 0.7 + 0.25*rng.Float64() // recipient-checking domains: their verdict says it
		if acceptAll {
			share = shares(rng)
		}
		for j := range simAddressesPerDom {
			a := &simAddr{acceptAll: acceptAll, real: rng.Float64() < share, sent: rng.IntN(2) == 0}
			a.verified = a.sent && rng.Float64() >= simNotVerifiedShare
			// The sandbox reads the verdict the check would give from the
			// local part: an accept-all domain accepts every one, one that
			// checks recipients accepts the real ones only.
			switch {
			case acceptAll:
				a.email = fmt.Sprintf("u%03d+accept-all@%s", j, domain)
			case a.real:
				a.email = fmt.Sprintf("u%03d+accepted-email@%s", j, domain)
			default:
				a.email = fmt.Sprintf("u%03d+rejected-email@%s", j, domain)
			}
			key, _, ok := verify.NormalizedKey(a.email)
			if !ok {
				t.Fatalf("bad simulated address %s", a.email)
			}
			a.key = key
			addrs = append(addrs, a)
		}
	}

	// Day 1: the account verifies what it is about to send to; the result
	// cache keeps the verdicts, which the report grades.
	*clock = clock.Add(24 * time.Hour)
	var entries []store.CacheEntry
	for _, a := range addrs {
		if a.verified {
			entries = append(entries, store.CacheEntry{Decision: verifyLive(a), ExpiresAt: clock.Add(365 * 24 * time.Hour)})
		}
	}
	if err := st.KeepDecisions(ctx, account, entries); err != nil {
		t.Fatal(err)
	}

	// Day 2: mail is sent to the half; what happens is reported. Real
	// mailboxes mostly take it, on one to four days (some also
	// soft-bounce or complain); some only soft-bounce or defer (a full
	// mailbox). The others bounce hard, some after a deferral.
	sendAt := clock.Add(24 * time.Hour)
	var posted []evs.Outcome
	for i, a := range addrs {
		if !a.sent {
			continue
		}
		at := sendAt.Add(time.Duration(i) * time.Second)
		o := func(k evs.OutcomeKind, bt string, after time.Duration) {
			a.outcomes = append(a.outcomes, evs.Outcome{Address: a.key, Kind: k, BounceType: bt, At: at.Add(after)})
		}
		switch r := rng.Float64(); {
		case !a.real:
			if rng.IntN(5) == 0 {
				o(evs.OutcomeDeferred, "", -time.Hour)
			}
			o(evs.OutcomeBounced, evs.BounceHard, 0)
		case r < 0.05:
			o(evs.OutcomeBounced, evs.BounceSoft, 0)
		case r < 0.10:
			o(evs.OutcomeDeferred, "", 0)
			o(evs.OutcomeBounced, "", time.Hour) // a bounce of no stated type counts as soft
		default:
			// Mailed up to four days running: each address must still
			// count once in its domain's counts.
			for d, n := 0, 1+rng.IntN(4); d < n; d++ {
				o(evs.OutcomeDelivered, "", time.Duration(d)*24*time.Hour)
			}
			if rng.IntN(10) == 0 {
				o(evs.OutcomeBounced, evs.BounceSoft, time.Hour)
			}
			if rng.IntN(20) == 0 {
				o(evs.OutcomeComplained, "", 2*time.Hour)
			}
		}
		posted = append(posted, a.outcomes...)
	}
	*clock = sendAt.Add(7 * 24 * time.Hour)
	res, err := storeOutcomes(ctx, h.d.Outcomes, account, posted, *clock, DefaultOutcomeTTL)
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != len(posted) || res.Duplicates != 0 {
		t.Fatalf("stored %+v of %d outcomes", res, len(posted))
	}

	// The domains' counts are of addresses, each once: as counted by hand.
	hand := map[string]evs.DomainCounts{}
	var domains []string
	for _, a := range addrs {
		dom := evs.AddressDomain(a.key)
		if _, ok := hand[dom]; !ok {
			domains = append(domains, dom)
		}
		c := hand[dom]
		var dl, hb bool
		for _, o := range a.outcomes {
			dl = dl || o.Kind == evs.OutcomeDelivered
			hb = hb || o.HardBounce()
		}
		if dl {
			c.Delivered++
		}
		if hb {
			c.HardBounces++
		}
		hand[dom] = c
	}
	counts, err := st.DomainCounts(ctx, account, domains, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, dom := range domains {
		if counts[dom] != hand[dom] {
			t.Fatalf("%s: the store counts %+v, by hand %+v", dom, counts[dom], hand[dom])
		}
	}

	// A week later every address is verified again, domain by domain as
	// a batch step does (verify.WithHistory, the path of batches and of
	// /v1/verify); every 25th address also alone through /v1/verify's
	// withHistory, which must agree.
	var f simFigures
	var nAll int
	p := evs.Principal{AccountID: account}
	befores := make([]evs.Decision, len(addrs))
	afters := make([]evs.Decision, len(addrs))
	for i, a := range addrs {
		befores[i] = verifyLive(a)
	}
	copy(afters, befores)
	for i := 0; i < len(addrs); i += simAddressesPerDom {
		if err := verify.WithHistory(ctx, st, account, false, afters[i:i+simAddressesPerDom]); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < len(addrs); i += 25 {
		if one := h.withHistory(ctx, p, befores[i]); !reflect.DeepEqual(one, afters[i]) {
			t.Fatalf("/v1/verify's path gave %+v, a batch's %+v", one, afters[i])
		}
	}
	for i, a := range addrs {
		before, after := befores[i], afters[i]
		if !a.sent {
			truth := 0.0
			if a.real {
				truth = 1
			}
			sq := func(s int) float64 { d := float64(s)/100 - truth; return d * d }
			f.brierAllBefore += sq(before.Score)
			f.brierAllAfter += sq(after.Score)
			nAll++
			if a.acceptAll {
				f.brierBefore += sq(before.Score)
				f.brierAfter += sq(after.Score)
				f.unsentAcceptAll++
			}
			if after.Checks.History != nil {
				t.Fatalf("an unsent address got history: %+v", after.Checks.History)
			}
			continue
		}
		var hard, delivered bool
		for _, o := range a.outcomes {
			hard = hard || o.HardBounce()
			delivered = delivered || o.Kind == evs.OutcomeDelivered
		}
		switch {
		case hard && before.Status() == evs.Undeliverable:
			f.rejectedBounced++
			if after.Reason == before.Reason && after.Checks.History != nil && after.Checks.History.Result == evs.HistoryNoted {
				f.rejectedKept++
			}
		case hard:
			f.hardBounced++
			if after.Reason == evs.ReasonKnownBounce && after.Checks.History != nil && after.Checks.History.Result == evs.HistoryKnownBounce {
				f.knownBounce++
			}
		default:
			if delivered && a.acceptAll {
				f.deliveredAcceptAll++
				if after.Status() == evs.Deliverable && after.Reason == evs.ReasonAcceptedEmail {
					f.nowDelivered++
				}
			}
			soft := false
			for _, o := range a.outcomes {
				soft = soft || o.Kind == evs.OutcomeComplained || (o.Kind == evs.OutcomeBounced && !o.HardBounce())
			}
			switch {
			case !delivered:
				f.softOnly++
			case soft:
				f.deliveredSoft++
			}
			if after.Status() == evs.Undeliverable {
				f.turnedUndeliverable++
			}
		}
	}
	f.brierBefore /= float64(f.unsentAcceptAll)
	f.brierAfter /= float64(f.unsentAcceptAll)
	f.unsent = nAll
	f.brierAllBefore /= float64(nAll)
	f.brierAllAfter /= float64(nAll)
	return f, addrs
}

// checkSimReport compares GET /v1/outcomes/report's table on the
// simulation with a count by hand: each outcome under the verdict and
// score the account was given before sending (none: not_verified).
func checkSimReport(t *testing.T, ctx context.Context, st *sqlitestore.Store, account string, addrs []*simAddr) {
	t.Helper()
	rep, err := buildOutcomesReport(ctx, st, account)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ sent, delivered, hard, soft, complaints, deferrals int }
	want := map[string]*row{}
	total := 0
	for _, a := range addrs {
		if !a.sent {
			continue
		}
		key := notVerified + "|"
		if a.verified {
			// What the sandbox answered on day 1: accept-all 60,
			// accepted 97, rejected 2.
			switch {
			case a.acceptAll:
				key = "risky|60-79"
			case a.real:
				key = "deliverable|80-100"
			default:
				key = "undeliverable|0-19"
			}
		}
		if want[key] == nil {
			want[key] = &row{}
		}
		r := want[key]
		for _, o := range a.outcomes {
			total++
			switch {
			case o.Kind == evs.OutcomeDelivered:
				r.sent++
				r.delivered++
			case o.Kind == evs.OutcomeBounced && o.BounceType == evs.BounceHard:
				r.sent++
				r.hard++
			case o.Kind == evs.OutcomeBounced:
				r.sent++
				r.soft++
			case o.Kind == evs.OutcomeComplained:
				r.complaints++
			case o.Kind == evs.OutcomeDeferred:
				r.deferrals++
			}
		}
	}
	if rep.Outcomes != total {
		t.Errorf("the report counts %d outcomes, by hand %d", rep.Outcomes, total)
	}
	if len(rep.Rows) != len(want) {
		t.Errorf("the report has %d rows, by hand %d: %+v", len(rep.Rows), len(want), rep.Rows)
	}
	for _, got := range rep.Rows {
		key := got.Status + "|"
		if got.ScoreBucket != nil {
			key += *got.ScoreBucket
		}
		w := want[key]
		if w == nil {
			t.Errorf("the report has a row %s the count by hand has not", key)
			continue
		}
		g := row{got.Sent, got.Delivered, got.HardBounces, got.SoftBounces, got.Complaints, got.Deferrals}
		if g != *w {
			t.Errorf("row %s: the report says %+v, by hand %+v", key, g, *w)
		}
		rate := float64(w.hard) / float64(w.sent)
		if got.BounceRate == nil || *got.BounceRate != rate {
			t.Errorf("row %s: bounce rate %v, by hand %v", key, got.BounceRate, rate)
		}
		t.Logf("report row %-24s sent %5d delivered %5d hard %5d soft %4d complaints %3d deferrals %4d bounce rate %.3f",
			key, got.Sent, got.Delivered, got.HardBounces, got.SoftBounces, got.Complaints, got.Deferrals, rate)
	}
}
