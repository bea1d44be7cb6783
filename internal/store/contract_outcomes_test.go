package store_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
)

func TestOutcomesContract(t *testing.T) {
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) {
		runOutcomesContract(t, func(t *testing.T, now func() time.Time) store.Outcomes { return sqliteStore(t, now) })
	})
	// The serving SQLite store skips the reads of addresses and domains
	// its filter knows have no outcomes, and keeps the counts it read
	// (countsMemo): a path of its own to the contract.
	t.Run("SQLiteServing", func(t *testing.T) {
		runOutcomesContract(t, func(t *testing.T, now func() time.Time) store.Outcomes { return servingStore(t, now) })
	})
	t.Run("DynamoDB", func(t *testing.T) {
		runOutcomesContract(t, func(t *testing.T, now func() time.Time) store.Outcomes { return dynamoStore(t, now) })
	})
}

// runOutcomesContract checks an outcome store: the natural key keeps a
// report sent twice once, the first report's fields kept; lookups by
// address and the whole account's listing see only the account's own,
// unexpired outcomes; deleting an address deletes all of its outcomes and
// nothing else.
func runOutcomesContract(t *testing.T, open func(t *testing.T, now func() time.Time) store.Outcomes) {
	ctx := context.Background()
	clk := testkit.NewClock(base)
	s := open(t, clk.Now)
	at := base.Add(-48 * time.Hour)
	hard := evs.Outcome{Address: "bob@example.com", Kind: evs.OutcomeBounced, BounceType: evs.BounceHard, At: at,
		SMTPReply: "550 5.1.1 <bob@example.com>: user unknown", Verdict: evs.Risky, Score: 60}
	delivered := evs.Outcome{Address: "bob@example.com", Kind: evs.OutcomeDelivered, At: at.Add(-time.Hour)}
	sameTime := evs.Outcome{Address: "bob@example.com", Kind: evs.OutcomeComplained, At: at}
	ann := evs.Outcome{Address: "ann#1@example.com", Kind: evs.OutcomeDelivered, At: at, Verdict: evs.Deliverable, Score: 97}
	keep := base.Add(365 * 24 * time.Hour)

	n, err := s.PutOutcomes(ctx, "a", []evs.Outcome{hard, delivered, sameTime, ann}, keep)
	must(t, err, "PutOutcomes")
	if n != 4 {
		t.Fatalf("added %d, want 4", n)
	}
	again := hard
	again.SMTPReply, again.Verdict, again.Score = "other text", evs.Deliverable, 97
	n, err = s.PutOutcomes(ctx, "a", []evs.Outcome{again, {Address: "bob@example.com", Kind: evs.OutcomeDeferred, At: at}}, keep)
	must(t, err, "PutOutcomes again")
	if n != 1 {
		t.Fatalf("the second call added %d, want 1 (one duplicate)", n)
	}
	// Another account's outcome for the same address is its own.
	n, err = s.PutOutcomes(ctx, "b", []evs.Outcome{hard}, keep)
	must(t, err, "PutOutcomes b")
	if n != 1 {
		t.Fatalf("account b added %d, want 1", n)
	}

	got, err := s.AddressOutcomes(ctx, "a", []string{"bob@example.com", "ann#1@example.com", "nobody@example.com", "bob@example.com"})
	must(t, err, "AddressOutcomes")
	if len(got["bob@example.com"]) != 4 || len(got["ann#1@example.com"]) != 1 || len(got) != 2 {
		t.Fatalf("AddressOutcomes = %+v", got)
	}
	for _, o := range got["bob@example.com"] {
		if o.Kind == evs.OutcomeBounced {
			if o.SMTPReply != hard.SMTPReply || o.Verdict != evs.Risky || o.Score != 60 || !o.At.Equal(at) || o.BounceType != evs.BounceHard {
				t.Errorf("the stored bounce is %+v, want the first report %+v", o, hard)
			}
		}
		if o.Kind == evs.OutcomeDelivered && (o.Verdict != "" || o.Score != 0) {
			t.Errorf("an outcome without a verdict read back %+v", o)
		}
	}
	if a := got["ann#1@example.com"][0]; a != ann {
		t.Errorf("ann read back %+v, want %+v", a, ann)
	}
	none, err := s.AddressOutcomes(ctx, "nobody", []string{"bob@example.com"})
	must(t, err, "AddressOutcomes of an account without outcomes")
	if len(none) != 0 {
		t.Fatalf("an account without outcomes got %+v", none)
	}

	var all []string
	must(t, s.EachOutcome(ctx, "a", func(o evs.Outcome) error {
		all = append(all, o.Address+" "+string(o.Kind))
		return nil
	}), "EachOutcome")
	sort.Strings(all)
	want := []string{"ann#1@example.com delivered", "bob@example.com bounced", "bob@example.com complained", "bob@example.com deferred", "bob@example.com delivered"}
	if len(all) != len(want) {
		t.Fatalf("EachOutcome = %v, want %v", all, want)
	}
	for i := range want {
		if all[i] != want[i] {
			t.Fatalf("EachOutcome = %v, want %v", all, want)
		}
	}

	d, err := s.DeleteOutcomes(ctx, "a", "bob@example.com")
	must(t, err, "DeleteOutcomes")
	if d != 4 {
		t.Fatalf("deleted %d, want 4", d)
	}
	got, err = s.AddressOutcomes(ctx, "a", []string{"bob@example.com", "ann#1@example.com"})
	must(t, err, "AddressOutcomes after delete")
	if len(got["bob@example.com"]) != 0 || len(got["ann#1@example.com"]) != 1 {
		t.Fatalf("after delete: %+v", got)
	}
	if got, _ := s.AddressOutcomes(ctx, "b", []string{"bob@example.com"}); len(got["bob@example.com"]) != 1 {
		t.Fatalf("deleting account a's outcomes touched account b's: %+v", got)
	}
	if d, err := s.DeleteOutcomes(ctx, "a", "bob@example.com"); err != nil || d != 0 {
		t.Fatalf("deleting again = %d, %v; want 0, nil", d, err)
	}

	// Expiry: nothing is returned at or after expiresAt, and the same
	// outcome can be reported again then.
	_, err = s.PutOutcomes(ctx, "c", []evs.Outcome{hard}, base.Add(time.Hour))
	must(t, err, "PutOutcomes c")
	// Read once before: what a store keeps of a read must expire too.
	if got, _ := s.AddressOutcomes(ctx, "c", []string{"bob@example.com"}); len(got["bob@example.com"]) != 1 {
		t.Fatalf("before expiry: %+v", got)
	}
	clk.Advance(time.Hour)
	got, err = s.AddressOutcomes(ctx, "c", []string{"bob@example.com"})
	must(t, err, "AddressOutcomes after expiry")
	if len(got) != 0 {
		t.Fatalf("an expired outcome was returned: %+v", got)
	}
	count := 0
	must(t, s.EachOutcome(ctx, "c", func(evs.Outcome) error { count++; return nil }), "EachOutcome after expiry")
	if count != 0 {
		t.Fatalf("EachOutcome listed %d expired outcomes", count)
	}
	if n, err = s.PutOutcomes(ctx, "c", []evs.Outcome{hard}, base.Add(48*time.Hour)); err != nil || n != 1 {
		t.Fatalf("reporting an expired outcome again added %d, %v; want 1", n, err)
	}
}

func TestLastVerdictsContract(t *testing.T) {
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) {
		runLastVerdictsContract(t, func(t *testing.T) lastVerdictStore { return sqliteStore(t, time.Now) })
	})
	t.Run("DynamoDB", func(t *testing.T) {
		runLastVerdictsContract(t, func(t *testing.T) lastVerdictStore { return dynamoStore(t, time.Now) })
	})
}

// lastVerdictStore is a store with a result cache and outcomes.
type lastVerdictStore interface {
	store.Outcomes
	KeepDecisions(ctx context.Context, accountID string, entries []store.CacheEntry) error
}

// runLastVerdictsContract: the latest of an address's cached decisions,
// whichever mode, expired or not, of the account's own cache only, for
// more addresses than one BatchGetItem takes.
func runLastVerdictsContract(t *testing.T, open func(t *testing.T) lastVerdictStore) {
	ctx := context.Background()
	s := open(t)
	dec := func(addr string, mode evs.Mode, r evs.Reason, at time.Time) evs.Decision {
		return evs.Decision{Email: addr, Normalized: addr, Reason: r, Mode: mode,
			Checks:    evs.Checks{Syntax: evs.SyntaxCheck{Valid: true}, DNS: evs.DNSCheck{Result: evs.DNSOK, MX: []string{}}, SMTP: evs.SMTPCheck{Result: evs.SMTPAcceptAll}},
			CheckedAt: evs.Time{Time: at}}
	}
	var entries []store.CacheEntry
	var addrs []string
	for i := range 60 {
		a := fmt.Sprintf("user%d@example.com", i)
		addrs = append(addrs, a)
		entries = append(entries, store.CacheEntry{Decision: dec(a, evs.ModeFull, evs.ReasonAcceptAll, base), ExpiresAt: base.Add(-time.Minute)})
	}
	// user0's quick check is later than its full one: it is the last.
	entries = append(entries, store.CacheEntry{Decision: dec("user0@example.com", evs.ModeQuick, evs.ReasonMailboxNotChecked, base.Add(time.Hour)), ExpiresAt: base.Add(2 * time.Hour)})
	must(t, s.KeepDecisions(ctx, "a", entries), "KeepDecisions")
	must(t, s.KeepDecisions(ctx, "b", []store.CacheEntry{{Decision: dec("other@example.com", evs.ModeFull, evs.ReasonAcceptedEmail, base), ExpiresAt: base.Add(time.Hour)}}), "KeepDecisions b")

	got, err := s.LastVerdicts(ctx, "a", append(addrs, "other@example.com", "user1@example.com"))
	must(t, err, "LastVerdicts")
	if len(got) != 60 {
		t.Fatalf("LastVerdicts found %d addresses, want 60 (not account b's)", len(got))
	}
	if d := got["user0@example.com"]; d.Reason != evs.ReasonMailboxNotChecked || d.Mode != evs.ModeQuick {
		t.Errorf("user0's last verdict = %s (%s), want the later quick check", d.Reason, d.Mode)
	}
	if d := got["user59@example.com"]; d.Reason != evs.ReasonAcceptAll || !d.CheckedAt.Equal(base) {
		t.Errorf("user59's last verdict = %+v", d)
	}
}

func TestDomainCountsContract(t *testing.T) {
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) {
		runDomainCountsContract(t, func(t *testing.T, now func() time.Time) store.Outcomes { return sqliteStore(t, now) })
	})
	// The serving SQLite store skips the reads of addresses and domains
	// its filter knows have no outcomes, and keeps the counts it read
	// (countsMemo): a path of its own to the contract.
	t.Run("SQLiteServing", func(t *testing.T) {
		runDomainCountsContract(t, func(t *testing.T, now func() time.Time) store.Outcomes { return servingStore(t, now) })
	})
	t.Run("DynamoDB", func(t *testing.T) {
		runDomainCountsContract(t, func(t *testing.T, now func() time.Time) store.Outcomes { return dynamoStore(t, now) })
	})
}

// runDomainCountsContract checks the per-domain counts: addresses
// delivered to and hard-bounced, each once however many such outcomes it
// has (a duplicate or a repeat adds nothing), the account's own unless
// shared, taken out when the address's outcomes are deleted, counted anew
// (not twice) after its first outcome expired, and gone once their bucket
// has ended. The shared counts take only outcomes of addresses the account
// had verified (store.SharesOutcome): an account's made-up bounces of
// addresses it never verified move its own counts, not everyone's.
func runDomainCountsContract(t *testing.T, open func(t *testing.T, now func() time.Time) store.Outcomes) {
	ctx := context.Background()
	clk := testkit.NewClock(base)
	s := open(t, clk.Now)
	at := base.Add(-time.Hour)
	// The account verified each address before the outcome.
	out := func(addr string, k evs.OutcomeKind, bt string, n int) evs.Outcome {
		return evs.Outcome{Address: addr, Kind: k, BounceType: bt, At: at.Add(time.Duration(n) * time.Minute), Verdict: evs.Deliverable, Score: 90}
	}
	keep := base.Add(365 * 24 * time.Hour)
	a := []evs.Outcome{
		out("ann@catchall.example", evs.OutcomeDelivered, "", 0),
		out("ann@catchall.example", evs.OutcomeDelivered, "", 1),
		out("bob@catchall.example", evs.OutcomeBounced, evs.BounceHard, 0),
		out("cy@catchall.example", evs.OutcomeBounced, evs.BounceSoft, 0), // not counted
		out("cy@catchall.example", evs.OutcomeBounced, "", 1),             // not counted
		out("cy@catchall.example", evs.OutcomeComplained, "", 2),          // not counted
		out(`"x@y"@catchall.example`, evs.OutcomeBounced, evs.BounceHard, 0),
		out("dee@other.example", evs.OutcomeDelivered, "", 0),
	}
	_, err := s.PutOutcomes(ctx, "a", a, keep)
	must(t, err, "PutOutcomes a")
	// Sent again: duplicates, counted once.
	_, err = s.PutOutcomes(ctx, "a", a[:3], keep)
	must(t, err, "PutOutcomes a again")
	_, err = s.PutOutcomes(ctx, "b", []evs.Outcome{out("eve@catchall.example", evs.OutcomeBounced, evs.BounceHard, 0)}, keep)
	must(t, err, "PutOutcomes b")

	check := func(step, acct string, shared bool, want map[string]evs.DomainCounts) {
		t.Helper()
		got, err := s.DomainCounts(ctx, acct, []string{"catchall.example", "other.example", "none.example", "catchall.example"}, shared)
		must(t, err, step)
		if len(got) != len(want) {
			t.Fatalf("%s: DomainCounts = %+v, want %+v", step, got, want)
		}
		for d, c := range want {
			if got[d] != c {
				t.Fatalf("%s: DomainCounts = %+v, want %+v", step, got, want)
			}
		}
	}
	c := func(dl, hb int) evs.DomainCounts { return evs.DomainCounts{Delivered: dl, HardBounces: hb} }
	// ann's two deliveries count her once; a later delivery to dee, once.
	_, err = s.PutOutcomes(ctx, "a", []evs.Outcome{out("dee@other.example", evs.OutcomeDelivered, "", 5)}, keep)
	must(t, err, "PutOutcomes a, a repeat")
	check("account a", "a", false, map[string]evs.DomainCounts{"catchall.example": c(1, 2), "other.example": c(1, 0)})
	check("account b", "b", false, map[string]evs.DomainCounts{"catchall.example": c(0, 1)})
	check("an account without outcomes", "nobody", false, map[string]evs.DomainCounts{})
	check("shared", "nobody", true, map[string]evs.DomainCounts{"catchall.example": c(1, 3), "other.example": c(1, 0)})

	// Account z verified none of the addresses it reports bouncing.
	var madeUp []evs.Outcome
	for i := range 200 {
		o := out(fmt.Sprintf("nobody%d@catchall.example", i), evs.OutcomeBounced, evs.BounceHard, 0)
		o.Verdict, o.Score = "", 0
		madeUp = append(madeUp, o)
	}
	_, err = s.PutOutcomes(ctx, "z", madeUp, keep)
	must(t, err, "PutOutcomes z")
	check("account z's own", "z", false, map[string]evs.DomainCounts{"catchall.example": c(0, 200)})
	check("shared after z's unverified bounces", "nobody", true, map[string]evs.DomainCounts{"catchall.example": c(1, 3), "other.example": c(1, 0)})
	_, err = s.DeleteOutcomes(ctx, "z", "nobody0@catchall.example")
	must(t, err, "DeleteOutcomes z")
	check("account z after a delete", "z", false, map[string]evs.DomainCounts{"catchall.example": c(0, 199)})
	check("shared after z's delete", "nobody", true, map[string]evs.DomainCounts{"catchall.example": c(1, 3), "other.example": c(1, 0)})

	d, err := s.DeleteOutcomes(ctx, "a", "ann@catchall.example")
	must(t, err, "DeleteOutcomes")
	if d != 2 {
		t.Fatalf("deleted %d, want 2", d)
	}
	check("account a after deleting ann", "a", false, map[string]evs.DomainCounts{"catchall.example": c(0, 2), "other.example": c(1, 0)})
	check("shared after deleting ann", "b", true, map[string]evs.DomainCounts{"catchall.example": c(0, 3), "other.example": c(1, 0)})
	// A delivered and then hard-bounced address counts in both.
	_, err = s.PutOutcomes(ctx, "a", []evs.Outcome{out("dee@other.example", evs.OutcomeBounced, evs.BounceHard, 9)}, keep)
	must(t, err, "PutOutcomes a, dee bounced")
	check("account a after dee bounced", "a", false, map[string]evs.DomainCounts{"catchall.example": c(0, 2), "other.example": c(1, 1)})

	// Outcomes kept an hour count until the end of that month, then no
	// more.
	_, err = s.PutOutcomes(ctx, "c", []evs.Outcome{out("fay@short.example", evs.OutcomeDelivered, "", 0)}, base.Add(time.Hour))
	must(t, err, "PutOutcomes c")
	got, err := s.DomainCounts(ctx, "c", []string{"short.example"}, false)
	must(t, err, "DomainCounts c")
	if got["short.example"] != c(1, 0) {
		t.Fatalf("DomainCounts c = %+v", got)
	}
	// Her first delivery expired; a new one counts her anew, not twice.
	clk.Advance(2 * time.Hour)
	_, err = s.PutOutcomes(ctx, "c", []evs.Outcome{out("fay@short.example", evs.OutcomeDelivered, "", 60)}, base.Add(3*time.Hour))
	must(t, err, "PutOutcomes c again")
	got, err = s.DomainCounts(ctx, "c", []string{"short.example"}, false)
	must(t, err, "DomainCounts c again")
	if got["short.example"] != c(1, 0) {
		t.Fatalf("DomainCounts c after a new delivery = %+v", got)
	}
	clk.Set(store.DomainBucket(base.Add(3 * time.Hour)))
	got, err = s.DomainCounts(ctx, "c", []string{"short.example"}, false)
	must(t, err, "DomainCounts c after the bucket")
	if len(got) != 0 {
		t.Fatalf("DomainCounts after the bucket's end = %+v", got)
	}
}

// servingStore is a SQLite store opened as the directory's only server.
func servingStore(t *testing.T, now func() time.Time) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.OpenServing(context.Background(), t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
