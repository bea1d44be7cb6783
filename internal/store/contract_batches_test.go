package store_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// statuses are the four outcome labels, each counted by its own counter.
var statuses = []evs.Status{evs.Deliverable, evs.Undeliverable, evs.Risky, evs.Unknown}

// reasonFor picks a reason that leads to each status.
var reasonFor = map[evs.Status]evs.Reason{
	evs.Deliverable: evs.ReasonAcceptedEmail, evs.Undeliverable: evs.ReasonRejectedEmail,
	evs.Risky: evs.ReasonAcceptAll, evs.Unknown: evs.ReasonGreylisted,
}

// newBatch returns a queued batch of n distinct items (plus dups duplicates
// the caller dropped) created at base, expiring a day later.
func newBatch(id, accountID string, n, dups int) (evs.Batch, []evs.Item) {
	b := evs.Batch{
		ID:        id,
		AccountID: accountID,
		Mode:      "quick",
		State:     evs.StateQueued,
		CreatedAt: base,
		ExpiresAt: base.Add(24 * time.Hour),
		Counters:  evs.Counters{Total: n + dups, Duplicates: dups},
		// Every read path must give the name and the lanes back, whatever
		// its script.
		Name:  "März list " + id,
		Lanes: []evs.Lane{{Provider: "google", Addresses: 400_000, RcptPerMin: 600}, {Provider: "mx.example", Addresses: n, RcptPerMin: 60}},
	}
	items := make([]evs.Item, n)
	for i := range items {
		d := fmt.Sprintf("d%d.example", i%7)
		items[i] = evs.Item{Seq: i, Email: fmt.Sprintf("User.%d@%s", i, d), Domain: d}
	}
	return b, items
}

// result returns the result of item seq with the given status; its decision
// names both so a test can tell which write it came from.
func result(seq int, status evs.Status) evs.Result {
	email := fmt.Sprintf("User.%d@d%d.example", seq, seq%7)
	sugg := fmt.Sprintf("user.%d@d%d.example", seq, seq%7)
	return evs.Result{
		Seq:   seq,
		Email: email,
		Decision: evs.Decision{
			Email: email, Normalized: strings.ToLower(email), Reason: reasonFor[status], Mode: evs.ModeFull,
			Suggestion: &sugg,
			Flags:      evs.Flags{Role: seq%2 == 0, Free: seq%3 == 0},
			Checks: evs.Checks{
				Syntax: evs.SyntaxCheck{Valid: true},
				DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: []string{fmt.Sprintf("mx.d%d.example", seq%7)}, Rcode: "NOERROR"},
				SMTP: evs.SMTPCheck{Result: evs.SMTPAccepted, Host: "mx.example", Code: 250, EnhancedCode: "2.1.5",
					Message: fmt.Sprintf("seq %d written as %s", seq, status), TLS: seq%2 == 1},
			},
			CheckedAt:  evs.Time{Time: base.Add(time.Duration(seq) * time.Millisecond)},
			DurationMs: int64(seq),
		},
	}
}

// statusOf spreads the four statuses over the seqs.
func statusOf(seq int) evs.Status { return statuses[seq%len(statuses)] }

func results(status func(int) evs.Status, seqs ...int) []evs.Result {
	rs := make([]evs.Result, len(seqs))
	for i, s := range seqs {
		rs[i] = result(s, status(s))
	}
	return rs
}

// add counts one result of status into c, as a store must.
func add(c *evs.Counters, status evs.Status) { c.Add(status) }

// checkInvariants fails t when b breaks the counter invariants of the API
// contract, which hold at every moment a client can observe.
func checkInvariants(t *testing.T, what string, b evs.Batch) {
	t.Helper()
	c := b.Counters
	if sum := c.Deliverable + c.Undeliverable + c.Risky + c.Unknown; c.Processed != sum {
		t.Errorf("%s: processed %d != deliverable+undeliverable+risky+unknown %d (%+v)", what, c.Processed, sum, c)
	}
	if c.Processed > c.Total-c.Duplicates {
		t.Errorf("%s: processed %d > total %d - duplicates %d", what, c.Processed, c.Total, c.Duplicates)
	}
	if b.State == evs.StateCompleted && c.Processed != c.Total-c.Duplicates {
		t.Errorf("%s: completed with processed %d != total %d - duplicates %d", what, c.Processed, c.Total, c.Duplicates)
	}
	if b.State.Final() == b.CompletedAt.IsZero() {
		t.Errorf("%s: state %s with CompletedAt %v", what, b.State, b.CompletedAt)
	}
}

// sameBatch fails t unless got equals want field by field.
func sameBatch(t *testing.T, what string, got, want evs.Batch) {
	t.Helper()
	if got.ID != want.ID || got.AccountID != want.AccountID || got.Mode != want.Mode ||
		got.State != want.State || got.Error != want.Error || got.Counters != want.Counters || got.Name != want.Name ||
		!slices.Equal(got.Lanes, want.Lanes) {
		t.Errorf("%s =\n  %+v\nwant\n  %+v", what, got, want)
	}
	sameTime(t, what+".CreatedAt", got.CreatedAt, want.CreatedAt)
	sameTime(t, what+".ExpiresAt", got.ExpiresAt, want.ExpiresAt)
	if want.CompletedAt.IsZero() {
		if !got.CompletedAt.IsZero() {
			t.Errorf("%s.CompletedAt = %v, want zero", what, got.CompletedAt)
		}
	} else {
		sameTime(t, what+".CompletedAt", got.CompletedAt, want.CompletedAt)
	}
	checkInvariants(t, what, got)
}

// stored reads the batch back and compares it with want.
func (e *env) stored(t *testing.T, what string, want evs.Batch) {
	t.Helper()
	got, err := e.st.Batch(e.ctx, want.AccountID, want.ID)
	must(t, err, what+": Batch")
	sameBatch(t, what+": Batch", got, want)
}

// create stores a batch of n items and dups duplicates.
func (e *env) create(t *testing.T, id, accountID string, n, dups int) (evs.Batch, []evs.Item) {
	t.Helper()
	b, items := newBatch(id, accountID, n, dups)
	must(t, e.st.CreateBatch(e.ctx, b, items), "CreateBatch")
	return b, items
}

// transition moves b from its state to `to` and checks the outcome.
func (e *env) transition(t *testing.T, b evs.Batch, to evs.State, errMsg string, now time.Time) evs.Batch {
	t.Helper()
	got, err := e.st.TransitionBatch(e.ctx, b.AccountID, b.ID, []evs.State{b.State}, to, errMsg, now)
	must(t, err, fmt.Sprintf("TransitionBatch %s→%s", b.State, to))
	b.State, b.Error = to, errMsg
	if to.Final() {
		b.CompletedAt = now
	}
	sameBatch(t, "TransitionBatch result", got, b)
	e.stored(t, "after TransitionBatch", b)
	return b
}

func runBatches(t *testing.T, newStore storeFactory) {
	t.Run("CreateAndRead", func(t *testing.T) {
		e := newEnv(t, newStore)
		b, items := e.create(t, "batch-1", "acct-1", 5, 2)
		e.stored(t, "new batch", b)
		if got := e.pending(t, "acct-1", "batch-1", 100); !slices.Equal(got, items) {
			t.Errorf("pending items = %+v, want %+v", got, items)
		}
		rs, err := e.st.Results(e.ctx, "acct-1", "batch-1", -1, 100, "")
		must(t, err, "Results")
		if len(rs) != 0 {
			t.Errorf("Results of a new batch = %d results, want 0", len(rs))
		}
	})

	// A second creation of an ID fails cleanly, however it is made, and
	// leaves the first batch as it was: a keyed creation (api) reads the
	// failure as its own earlier call's batch.
	t.Run("CreateExistingIDRefused", func(t *testing.T) {
		e := newEnv(t, newStore)
		b, _ := e.create(t, "batch-1", "acct-1", 3, 0)
		again, items := newBatch("batch-1", "acct-1", 5, 1)
		for _, maxActive := range []int{0, 10} {
			err := e.st.CreateBatchWithin(e.ctx, again, items, maxActive)
			wantCode(t, err, evs.CodeInvalidState, fmt.Sprintf("CreateBatchWithin(maxActive=%d) of an existing ID", maxActive))
		}
		e.stored(t, "after a second creation", b)
	})

	t.Run("NotFound", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.create(t, "batch-1", "acct-1", 3, 0)
		for _, c := range []struct{ acct, id string }{
			{"acct-2", "batch-1"}, // another account's batch
			{"acct-1", "batch-404"},
			{"acct-1", ""},
		} {
			what := fmt.Sprintf("(%s, %s)", c.acct, c.id)
			_, err := e.st.Batch(e.ctx, c.acct, c.id)
			wantCode(t, err, evs.CodeNotFound, "Batch"+what)
			_, err = e.st.TransitionBatch(e.ctx, c.acct, c.id, []evs.State{evs.StateQueued}, evs.StateRunning, "", base)
			wantCode(t, err, evs.CodeNotFound, "TransitionBatch"+what)
			_, err = e.st.PutResults(e.ctx, c.acct, c.id, results(statusOf, 0), base)
			wantCode(t, err, evs.CodeNotFound, "PutResults"+what)
			_, err = e.st.Results(e.ctx, c.acct, c.id, -1, 10, "")
			wantCode(t, err, evs.CodeNotFound, "Results"+what)
			_, _, err = e.st.InputItems(e.ctx, c.acct, c.id, 0, 10)
			wantCode(t, err, evs.CodeNotFound, "InputItems"+what)
			_, err = e.st.FirstPending(e.ctx, c.acct, c.id, -1, 10)
			wantCode(t, err, evs.CodeNotFound, "FirstPending"+what)
		}
		// None of that touched the real batch.
		b, _ := newBatch("batch-1", "acct-1", 3, 0)
		e.stored(t, "batch after calls by others", b)
	})

	t.Run("TransitionChecksFrom", func(t *testing.T) {
		e := newEnv(t, newStore)
		b, _ := e.create(t, "batch-1", "acct-1", 3, 0)
		_, err := e.st.TransitionBatch(e.ctx, "acct-1", "batch-1", []evs.State{evs.StateRunning}, evs.StateCompleted, "", base)
		wantCode(t, err, evs.CodeInvalidState, "TransitionBatch running→completed of a queued batch")
		e.stored(t, "queued batch after a refused transition", b)
		_, err = e.st.TransitionBatch(e.ctx, "acct-1", "batch-1", nil, evs.StateRunning, "", base)
		wantCode(t, err, evs.CodeInvalidState, "TransitionBatch from no state")
		e.stored(t, "queued batch after a refused transition", b)

		// A from that names the current state allows only the moves from
		// it, whatever another state named could do: queued → running is
		// a move, running → running is not.
		b = e.transition(t, b, evs.StateRunning, "", base)
		_, err = e.st.TransitionBatch(e.ctx, "acct-1", "batch-1", []evs.State{evs.StateQueued, evs.StateRunning}, evs.StateRunning, "", base)
		wantError(t, err, evs.CodeInvalidState, "The request is running.", "TransitionBatch queued|running→running of a running batch")
		e.stored(t, "running batch after a refused transition", b)

		// Several allowed states: the current one among them is enough.
		got, err := e.st.TransitionBatch(e.ctx, "acct-1", "batch-1", []evs.State{evs.StateRunning, evs.StateQueued}, evs.StateCancelled, "", base.Add(time.Second))
		must(t, err, "TransitionBatch running|queued→cancelled")
		b.State, b.CompletedAt = evs.StateCancelled, base.Add(time.Second)
		sameBatch(t, "cancelled batch", got, b)
	})

	t.Run("PutResultsCountsAndCompletes", func(t *testing.T) {
		for _, startRunning := range []bool{true, false} {
			t.Run(fmt.Sprintf("running=%v", startRunning), func(t *testing.T) {
				e := newEnv(t, newStore)
				b, _ := e.create(t, "batch-1", "acct-1", 6, 1)
				if startRunning {
					b = e.transition(t, b, evs.StateRunning, "", base)
				}
				want := b
				written := map[int]evs.Status{}
				put := func(step string, now time.Time, rs []evs.Result) {
					t.Helper()
					for _, r := range rs {
						if _, ok := written[r.Seq]; !ok {
							written[r.Seq] = r.Status()
							add(&want.Counters, r.Status())
						}
					}
					if len(written) == 6 && !want.State.Final() {
						want.State, want.CompletedAt = evs.StateCompleted, now
					}
					got, err := e.st.PutResults(e.ctx, "acct-1", "batch-1", rs, now)
					must(t, err, step+": PutResults")
					sameBatch(t, step+": PutResults result", got, want)
					e.stored(t, step, want)
				}
				put("first", base.Add(1*time.Second), []evs.Result{result(0, evs.Deliverable), result(1, evs.Undeliverable)})
				// Redelivered results are skipped, whatever they say now.
				put("redelivery", base.Add(2*time.Second), []evs.Result{result(0, evs.Risky), result(1, evs.Unknown), result(2, evs.Risky)})
				put("empty", base.Add(3*time.Second), nil)
				put("more", base.Add(4*time.Second), []evs.Result{result(3, evs.Unknown), result(4, evs.Deliverable)})
				if want.State == evs.StateCompleted {
					t.Fatal("test bug: completed early")
				}
				put("last", base.Add(5*time.Second), []evs.Result{result(4, evs.Unknown), result(5, evs.Risky)})
				if want.State != evs.StateCompleted {
					t.Fatal("test bug: not completed")
				}
				put("after completion", base.Add(6*time.Second), []evs.Result{result(5, evs.Deliverable), result(0, evs.Unknown)})

				rs, err := e.st.Results(e.ctx, "acct-1", "batch-1", -1, 100, "")
				must(t, err, "Results")
				if len(rs) != len(written) {
					t.Fatalf("Results = %d results, want %d", len(rs), len(written))
				}
				for i, r := range rs {
					sameResult(t, fmt.Sprintf("Results[%d]", i), r, result(i, written[i]))
				}
			})
		}
	})

	t.Run("PutResultsOfCancelledBatchNotWritten", func(t *testing.T) {
		e := newEnv(t, newStore)
		b, items := e.create(t, "batch-1", "acct-1", 4, 0)
		b = e.transition(t, b, evs.StateRunning, "", base)
		got, err := e.st.PutResults(e.ctx, "acct-1", "batch-1", results(statusOf, 0), base.Add(time.Second))
		must(t, err, "PutResults")
		b.Counters.Processed, b.Counters.Deliverable = 1, 1
		sameBatch(t, "PutResults result", got, b)
		b = e.transition(t, b, evs.StateCancelled, "", base.Add(2*time.Second))

		got, err = e.st.PutResults(e.ctx, "acct-1", "batch-1", results(statusOf, 1, 2, 3), base.Add(3*time.Second))
		must(t, err, "PutResults to a cancelled batch")
		sameBatch(t, "PutResults to a cancelled batch", got, b)
		e.stored(t, "cancelled batch", b)
		rs, err := e.st.Results(e.ctx, "acct-1", "batch-1", -1, 100, "")
		must(t, err, "Results")
		if len(rs) != 1 || rs[0].Seq != 0 {
			t.Errorf("Results of the cancelled batch = %+v, want only seq 0", rs)
		}
		if pending := e.pending(t, "acct-1", "batch-1", 100); !slices.Equal(pending, items[1:]) {
			t.Errorf("pending items of the cancelled batch = %+v, want %+v", pending, items[1:])
		}
	})

	t.Run("ConcurrentPutResults", func(t *testing.T) {
		e := newEnv(t, newStore)
		const n, workers = 400, 8
		b, _ := e.create(t, "batch-1", "acct-1", n, 3)
		b = e.transition(t, b, evs.StateRunning, "", base)
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			errs  = make([]error, workers)
			seen  = make([]evs.Batch, workers)
		)
		for w := range workers {
			wg.Go(func() {
				<-start
				// Each worker writes a window of 150 seqs that overlaps its
				// neighbours', in calls of a size of its own.
				var seqs []int
				for s := w * n / workers; s < w*n/workers+150; s++ {
					seqs = append(seqs, s%n)
				}
				chunk := 10 + w*7
				for len(seqs) > 0 && errs[w] == nil {
					k := min(chunk, len(seqs))
					var got evs.Batch
					got, errs[w] = e.st.PutResults(e.ctx, "acct-1", "batch-1", results(statusOf, seqs[:k]...), base.Add(time.Minute))
					seen[w] = got
					seqs = seqs[k:]
				}
			})
		}
		close(start)
		wg.Wait()
		for w := range workers {
			must(t, errs[w], fmt.Sprintf("worker %d", w))
			checkInvariants(t, fmt.Sprintf("worker %d's last batch", w), seen[w])
		}
		want := b
		for s := range n {
			add(&want.Counters, statusOf(s))
		}
		want.State, want.CompletedAt = evs.StateCompleted, base.Add(time.Minute)
		e.stored(t, "after concurrent writers", want)
		rs, err := e.st.Results(e.ctx, "acct-1", "batch-1", -1, 1000, "")
		must(t, err, "Results")
		if len(rs) != n {
			t.Fatalf("Results = %d, want %d", len(rs), n)
		}
	})

	t.Run("ResultsPaging", func(t *testing.T) {
		e := newEnv(t, newStore)
		const n = 23
		b, _ := e.create(t, "batch-1", "acct-1", n, 0)
		e.transition(t, b, evs.StateRunning, "", base)
		// Written out of order and with gaps: 7, 15 and 22 have no result.
		order := []int{20, 3, 0, 9, 1, 14, 2, 4, 5, 6, 8, 21, 10, 11, 12, 13, 16, 17, 18, 19}
		for i := 0; i < len(order); i += 6 {
			_, err := e.st.PutResults(e.ctx, "acct-1", "batch-1", results(statusOf, order[i:min(i+6, len(order))]...), base)
			must(t, err, "PutResults")
		}
		written := slices.Sorted(slices.Values(order))
		for _, status := range append([]evs.Status{""}, statuses...) {
			var want []int
			for _, s := range written {
				if status == "" || statusOf(s) == status {
					want = append(want, s)
				}
			}
			for _, limit := range []int{1, 2, 5, 100} {
				var got []int
				after := -1
				for range n + 2 {
					page, err := e.st.Results(e.ctx, "acct-1", "batch-1", after, limit, status)
					must(t, err, "Results")
					if len(page) > limit {
						t.Fatalf("Results(limit %d) returned %d", limit, len(page))
					}
					if len(page) == 0 {
						break
					}
					for _, r := range page {
						sameResult(t, "Results page", r, result(r.Seq, statusOf(r.Seq)))
						got = append(got, r.Seq)
					}
					after = page[len(page)-1].Seq
				}
				if !slices.Equal(got, want) {
					t.Errorf("Results status=%q limit=%d paged through %v, want %v", status, limit, got, want)
				}
			}
		}
		// A page starting in the middle.
		page, err := e.st.Results(e.ctx, "acct-1", "batch-1", 6, 3, "")
		must(t, err, "Results")
		if got := seqsOf(page); !slices.Equal(got, []int{8, 9, 10}) {
			t.Errorf("Results(after 6, limit 3) = %v, want [8 9 10]", got)
		}
		page, err = e.st.Results(e.ctx, "acct-1", "batch-1", 21, 10, "")
		must(t, err, "Results")
		if len(page) != 0 {
			t.Errorf("Results after the last = %v, want none", seqsOf(page))
		}
	})

	t.Run("PendingItems", func(t *testing.T) {
		e := newEnv(t, newStore)
		b, items := e.create(t, "batch-1", "acct-1", 10, 0)
		e.transition(t, b, evs.StateRunning, "", base)
		_, err := e.st.PutResults(e.ctx, "acct-1", "batch-1", results(statusOf, 8, 1, 3, 4), base)
		must(t, err, "PutResults")
		// Every item, once, whatever the page size; the order is the
		// store's plan order.
		for _, limit := range []int{1, 2, 4, 100} {
			if got := e.pending(t, "acct-1", "batch-1", limit); !slices.Equal(got, []evs.Item{items[0], items[2], items[5], items[6], items[7], items[9]}) {
				t.Errorf("pending items, pages of %d = %+v", limit, got)
			}
		}
		for _, c := range []struct{ after, upTo, want int }{
			{-1, 100, 0}, {0, 100, 2}, {2, 3, -1}, {2, 5, 5}, {7, 8, -1}, {7, 9, 9}, {9, 100, -1},
		} {
			got, err := e.st.FirstPending(e.ctx, "acct-1", "batch-1", c.after, c.upTo)
			must(t, err, "FirstPending")
			if got != c.want {
				t.Errorf("FirstPending(%d, %d) = %d, want %d", c.after, c.upTo, got, c.want)
			}
		}
	})

	t.Run("UnfinishedBatches", func(t *testing.T) {
		e := newEnv(t, newStore)
		got, err := e.st.UnfinishedBatches(e.ctx)
		must(t, err, "UnfinishedBatches on an empty store")
		if len(got) != 0 {
			t.Fatalf("UnfinishedBatches on an empty store = %d", len(got))
		}
		want := map[string]evs.Batch{}
		for i, to := range []evs.State{"", evs.StateRunning, evs.StateCompleted, evs.StateCancelled, evs.StateFailed, "", evs.StateRunning} {
			b, _ := e.create(t, fmt.Sprintf("batch-%d", i), fmt.Sprintf("acct-%d", i%3), 2, 0)
			switch to {
			case "":
			case evs.StateCompleted:
				var err error
				b, err = e.st.PutResults(e.ctx, b.AccountID, b.ID, results(statusOf, 0, 1), base.Add(time.Second))
				must(t, err, "PutResults")
			default:
				b = e.transition(t, b, to, "", base.Add(time.Second))
			}
			if !b.State.Final() {
				want[b.ID] = b
			}
		}
		got, err = e.st.UnfinishedBatches(e.ctx)
		must(t, err, "UnfinishedBatches")
		if len(got) != len(want) {
			t.Errorf("UnfinishedBatches = %d batches, want %d", len(got), len(want))
		}
		for _, b := range got {
			w, ok := want[b.ID]
			if !ok {
				t.Errorf("UnfinishedBatches lists %s in state %s", b.ID, b.State)
				continue
			}
			sameBatch(t, "UnfinishedBatches entry", b, w)
			delete(want, b.ID)
		}
		for id := range want {
			t.Errorf("UnfinishedBatches misses %s", id)
		}
	})

	// A batch keeps its request's maxAge (the bound on the cached verdicts
	// it reuses) through every read: a restart, or a worker reading it
	// per message, applies the same bound, "reuse nothing" included.
	t.Run("KeepsMaxAge", func(t *testing.T) {
		e := newEnv(t, newStore)
		for i, maxAge := range []time.Duration{0, evs.NoReuse, 90 * time.Second, 500 * time.Microsecond} {
			// Kept in whole milliseconds; a shorter bound is still a bound.
			want := maxAge
			if want > 0 && want < time.Millisecond {
				want = time.Millisecond
			}
			b, items := newBatch(fmt.Sprintf("batch-%d", i), "acct-1", 2, 0)
			b.MaxAge = maxAge
			must(t, e.st.CreateBatch(e.ctx, b, items), "CreateBatch")
			for _, r := range []struct {
				how  string
				read func() (evs.Batch, error)
			}{
				{"Batch", func() (evs.Batch, error) { return e.st.Batch(e.ctx, b.AccountID, b.ID) }},
				{"TransitionBatch", func() (evs.Batch, error) {
					return e.st.TransitionBatch(e.ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateRunning, "", base)
				}},
				{"PutResults", func() (evs.Batch, error) {
					return e.st.PutResults(e.ctx, b.AccountID, b.ID, results(statusOf, 0), base)
				}},
				{"UnfinishedBatches", func() (evs.Batch, error) {
					un, err := e.st.UnfinishedBatches(e.ctx)
					for _, u := range un {
						if u.ID == b.ID {
							return u, err
						}
					}
					return evs.Batch{}, fmt.Errorf("%s not listed (%v)", b.ID, err)
				}},
			} {
				got, err := r.read()
				must(t, err, r.how)
				if got.MaxAge != want {
					t.Errorf("maxAge %v read back by %s as %v", maxAge, r.how, got.MaxAge)
				}
			}
		}
	})

	t.Run("ActiveBatchesLimit", func(t *testing.T) {
		e := newEnv(t, newStore)
		const max = 3
		n, err := e.st.ActiveBatches(e.ctx, "acct-a")
		must(t, err, "ActiveBatches on an empty store")
		if n != 0 {
			t.Fatalf("ActiveBatches on an empty store = %d", n)
		}
		var bs []evs.Batch
		for i := range max {
			b, items := newBatch(fmt.Sprintf("act-%d", i), "acct-a", 2, 0)
			must(t, e.st.CreateBatchWithin(e.ctx, b, items, max), "CreateBatchWithin under the limit")
			bs = append(bs, b)
		}
		bs[1] = e.transition(t, bs[1], evs.StateRunning, "", base.Add(time.Second))
		// Another account's batches do not count.
		other, oitems := newBatch("act-other", "acct-b", 1, 0)
		must(t, e.st.CreateBatchWithin(e.ctx, other, oitems, 1), "CreateBatchWithin of another account")
		n, err = e.st.ActiveBatches(e.ctx, "acct-a")
		must(t, err, "ActiveBatches")
		if n != max {
			t.Fatalf("ActiveBatches = %d, want %d", n, max)
		}
		extra, xitems := newBatch("act-extra", "acct-a", 2, 0)
		wantCode(t, e.st.CreateBatchWithin(e.ctx, extra, xitems, max), evs.CodeRateLimited, "CreateBatchWithin at the limit")
		if _, err := e.st.Batch(e.ctx, "acct-a", extra.ID); evs.ErrorCode(err) != evs.CodeNotFound {
			t.Fatalf("a refused batch was stored: %v", err)
		}
		must(t, e.st.CreateBatchWithin(e.ctx, extra, xitems, 0), "CreateBatchWithin with no limit")
		// A final batch frees its place: cancelled, and completed.
		e.transition(t, extra, evs.StateCancelled, "", base.Add(time.Second))
		e.transition(t, bs[0], evs.StateCancelled, "", base.Add(time.Second))
		_, err = e.st.PutResults(e.ctx, "acct-a", bs[1].ID, results(statusOf, 0, 1), base.Add(time.Second))
		must(t, err, "PutResults")
		n, err = e.st.ActiveBatches(e.ctx, "acct-a")
		must(t, err, "ActiveBatches after two finished")
		if n != 1 {
			t.Fatalf("ActiveBatches = %d after two finished, want 1", n)
		}
		// Concurrent creations for the two places left: exactly two pass.
		var wg sync.WaitGroup
		var mu sync.Mutex
		passed, limited := 0, 0
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, items := newBatch(fmt.Sprintf("race-%d", i), "acct-a", 2, 0)
				err := e.st.CreateBatchWithin(e.ctx, b, items, max)
				mu.Lock()
				defer mu.Unlock()
				switch evs.ErrorCode(err) {
				case "":
					passed++
				case evs.CodeRateLimited:
					limited++
				default:
					t.Errorf("concurrent CreateBatchWithin: %v", err)
				}
			}()
		}
		wg.Wait()
		if passed != 2 || limited != 4 {
			t.Fatalf("concurrent creations: %d passed, %d limited; want 2 and 4", passed, limited)
		}
		n, err = e.st.ActiveBatches(e.ctx, "acct-a")
		must(t, err, "ActiveBatches after the race")
		if n != max {
			t.Fatalf("ActiveBatches = %d after the race, want %d", n, max)
		}
	})

	t.Run("CreateBatch50k", func(t *testing.T) {
		e := newEnv(t, newStore)
		const n = 50_000
		b, items := e.create(t, "batch-big", "acct-1", n, 17)
		e.stored(t, "big batch", b)
		if got := e.pending(t, "acct-1", "batch-big", 5000); !slices.Equal(got, items) {
			t.Errorf("pending items of the big batch: %d, want all %d", len(got), len(items))
		}
		page, next, err := e.st.InputItems(e.ctx, "acct-1", "batch-big", n-9, 1000)
		must(t, err, "InputItems")
		if len(page) != 9 || next != -1 {
			t.Errorf("InputItems from the ninth last: %d items, next %d; want 9 and -1", len(page), next)
		}
	})
}

// pending reads the batch's whole input limit items at a time, as the
// planner does, and returns the items without results in seq order.
func (e *env) pending(t *testing.T, accountID, id string, limit int) []evs.Item {
	t.Helper()
	var all []evs.Item
	for from, calls := 0, 0; from >= 0; calls++ {
		page, next, err := e.st.InputItems(e.ctx, accountID, id, from, limit)
		must(t, err, "InputItems")
		if len(page) > limit || calls > 100_000 || (next >= 0 && next <= from) {
			t.Fatalf("InputItems(%d, %d) = %d items, next %d (call %d)", from, limit, len(page), next, calls)
		}
		all, from = append(all, page...), next
	}
	if len(all) > 0 {
		var err error
		all, err = e.st.WithoutResults(e.ctx, accountID, id, all)
		must(t, err, "WithoutResults")
	}
	slices.SortFunc(all, func(a, b evs.Item) int { return a.Seq - b.Seq })
	return all
}

func seqsOf(rs []evs.Result) []int {
	s := make([]int, len(rs))
	for i, r := range rs {
		s[i] = r.Seq
	}
	return s
}

func sameResult(t *testing.T, what string, got, want evs.Result) {
	t.Helper()
	if got.Seq != want.Seq || got.Email != want.Email || !reflect.DeepEqual(got.Decision, want.Decision) {
		t.Errorf("%s =\n  %+v\nwant\n  %+v", what, got, want)
	}
}
