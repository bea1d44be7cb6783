package store_test

// The rules the two stores must share, one table each: which batch
// transitions are allowed and with which error the others are refused,
// what a new batch must be, when a batch has expired, and that an account
// name picks one account. Messages are pinned word for word: a client
// reads the same reply whichever deployment answers.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

func runRules(t *testing.T, newStore storeFactory) {
	t.Run("Transitions", func(t *testing.T) { runTransitionRules(t, newStore) })
	t.Run("PutNothing", func(t *testing.T) { runPutNothing(t, newStore) })
	t.Run("NewBatch", func(t *testing.T) { runNewBatchRules(t, newStore) })
	t.Run("Expiry", func(t *testing.T) { runExpiryRules(t, newStore) })
	t.Run("AccountNames", func(t *testing.T) { runAccountNameRules(t, newStore) })
}

// wantError fails t unless err has the evs code and client message want.
func wantError(t *testing.T, err error, code, msg, what string) {
	t.Helper()
	wantCode(t, err, code, what)
	if got := evs.ErrorMessage(err); got != msg {
		t.Errorf("%s: message %q, want %q", what, got, msg)
	}
}

// reach creates batch id of n items and brings it to state st the way the
// service does: running by a transition, completed by its last result,
// cancelled and failed from running.
func (e *env) reach(t *testing.T, id string, n int, st evs.State) evs.Batch {
	t.Helper()
	b, _ := e.create(t, id, "acct-1", n, 0)
	if st == evs.StateQueued {
		return b
	}
	b = e.transition(t, b, evs.StateRunning, "", base)
	switch st {
	case evs.StateCompleted:
		seqs := make([]int, n)
		for i := range seqs {
			seqs[i] = i
		}
		got, err := e.st.PutResults(e.ctx, b.AccountID, b.ID, results(statusOf, seqs...), base)
		must(t, err, "PutResults")
		if got.State != evs.StateCompleted {
			t.Fatalf("after every result: state %s, want completed", got.State)
		}
		return got
	case evs.StateCancelled, evs.StateFailed:
		return e.transition(t, b, st, "", base)
	}
	return b
}

// runTransitionRules tries every move between the states (and to a state
// that is none), the caller believing the batch is in the state it is in.
// The allowed ones are the contract's, section 3: queued → running →
// completed (with every result); queued/running → cancelled; queued/running
// → failed. Every other is invalid_state and leaves the batch as it was.
func runTransitionRules(t *testing.T, newStore storeFactory) {
	allowed := map[[2]evs.State]bool{
		{evs.StateQueued, evs.StateRunning}:    true,
		{evs.StateQueued, evs.StateCancelled}:  true,
		{evs.StateQueued, evs.StateFailed}:     true,
		{evs.StateRunning, evs.StateCompleted}: true,
		{evs.StateRunning, evs.StateCancelled}: true,
		{evs.StateRunning, evs.StateFailed}:    true,
	}
	states := []evs.State{evs.StateQueued, evs.StateRunning, evs.StateCompleted, evs.StateCancelled, evs.StateFailed}
	type tcase struct {
		from, to evs.State
		items    int    // distinct items, none with a result unless the batch is completed
		msg      string // the refusal's message; "" when the move is allowed
	}
	var cases []tcase
	for _, from := range states {
		for _, to := range append(slices.Clone(states), "expired", "") {
			c := tcase{from: from, to: to, items: 2}
			if !allowed[[2]evs.State{from, to}] {
				c.msg = fmt.Sprintf("The request is %s.", from)
			}
			if from == evs.StateRunning && to == evs.StateCompleted {
				// Allowed only once every item has its result.
				c.msg = "The request still has items without a result."
				cases = append(cases, c, tcase{from: from, to: to, items: 0})
				continue
			}
			cases = append(cases, c)
		}
	}
	e := newEnv(t, newStore)
	at := base.Add(time.Hour)
	for i, c := range cases {
		what := fmt.Sprintf("%s→%q with %d items", c.from, c.to, c.items)
		t.Run(what, func(t *testing.T) {
			b := e.reach(t, fmt.Sprintf("batch-%d", i), c.items, c.from)
			got, err := e.st.TransitionBatch(e.ctx, b.AccountID, b.ID, []evs.State{c.from}, c.to, "why", at)
			if c.msg != "" {
				wantError(t, err, evs.CodeInvalidState, c.msg, "TransitionBatch "+what)
				e.stored(t, "after a refused "+what, b)
				return
			}
			must(t, err, "TransitionBatch "+what)
			b.State, b.Error = c.to, "why"
			if c.to.Final() {
				b.CompletedAt = at
			}
			sameBatch(t, "TransitionBatch "+what, got, b)
			e.stored(t, "after "+what, b)
		})
	}
}

// runPutNothing checks PutResults without results: it writes nothing, and
// completes a batch that has every result already: one of no items, which
// otherwise would never complete.
func runPutNothing(t *testing.T, newStore storeFactory) {
	for _, c := range []struct {
		from  evs.State
		items int
		want  evs.State
	}{
		{evs.StateQueued, 0, evs.StateCompleted},
		{evs.StateRunning, 0, evs.StateCompleted},
		{evs.StateQueued, 2, evs.StateQueued},
		{evs.StateRunning, 2, evs.StateRunning},
		{evs.StateCancelled, 0, evs.StateCancelled},
		{evs.StateFailed, 2, evs.StateFailed},
	} {
		what := fmt.Sprintf("%s with %d items", c.from, c.items)
		t.Run(what, func(t *testing.T) {
			e := newEnv(t, newStore)
			b := e.reach(t, "batch-1", c.items, c.from)
			at := base.Add(time.Minute)
			got, err := e.st.PutResults(e.ctx, b.AccountID, b.ID, nil, at)
			must(t, err, "PutResults(nil) of a "+what)
			if b.State != c.want {
				b.State, b.CompletedAt = c.want, at
			}
			sameBatch(t, "PutResults(nil) of a "+what, got, b)
			e.stored(t, "after PutResults(nil) of a "+what, b)
		})
	}
}

// runNewBatchRules checks what a store refuses to create: a batch with no
// ID or account, or whose items' sequence numbers are not distinct
// non-negative numbers. Nothing of a refused batch is stored.
func runNewBatchRules(t *testing.T, newStore storeFactory) {
	twoItems := func() []evs.Item { _, items := newBatch("x", "x", 2, 0); return items }
	for _, c := range []struct {
		name     string
		id, acct string
		items    func() []evs.Item
		msg      string
	}{
		{"NoID", "", "acct-1", twoItems, "A request needs an ID and an account."},
		{"NoAccount", "batch-1", "", twoItems, "A request needs an ID and an account."},
		{"NegativeSeq", "batch-1", "acct-1", func() []evs.Item {
			items := twoItems()
			items[1].Seq = -1
			return items
		}, "An item of the request has a negative sequence number."},
		{"SameSeqTwice", "batch-1", "acct-1", func() []evs.Item {
			items := twoItems()
			items[1].Seq = items[0].Seq
			return items
		}, "Two items of the request have the same sequence number."},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, newStore)
			b, _ := newBatch(c.id, c.acct, 2, 0)
			for _, maxActive := range []int{0, 10} {
				err := e.st.CreateBatchWithin(e.ctx, b, c.items(), maxActive)
				wantError(t, err, evs.CodeInvalidRequest, c.msg, fmt.Sprintf("CreateBatchWithin(maxActive=%d)", maxActive))
			}
			_, err := e.st.Batch(e.ctx, c.acct, c.id)
			wantError(t, err, evs.CodeNotFound, "No such request.", "Batch after a refused creation")
			n, err := e.st.ActiveBatches(e.ctx, c.acct)
			must(t, err, "ActiveBatches")
			if n != 0 {
				t.Errorf("ActiveBatches after a refused creation = %d, want 0", n)
			}
		})
	}
}

// runExpiryRules checks every read and write of a batch against its
// ExpiresAt, by the store's clock: one millisecond before it the batch is
// there; at the instant itself and after, it is gone (not_found, and
// neither listed nor counted), whether or not it has been deleted yet.
func runExpiryRules(t *testing.T, newStore storeFactory) {
	now := base.Add(time.Hour)
	errUnlisted := evs.Errorf(evs.CodeNotFound, "No such request.")
	listed := func(bs []evs.Batch, err error, id string) error {
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(bs, func(b evs.Batch) bool { return b.ID == id }) {
			return errUnlisted
		}
		return nil
	}
	ops := []struct {
		name string
		do   func(e *env, b evs.Batch) error
	}{
		{"Batch", func(e *env, b evs.Batch) error { _, err := e.st.Batch(e.ctx, b.AccountID, b.ID); return err }},
		{"TransitionBatch", func(e *env, b evs.Batch) error {
			_, err := e.st.TransitionBatch(e.ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateRunning, "", now)
			return err
		}},
		{"PutResults", func(e *env, b evs.Batch) error {
			_, err := e.st.PutResults(e.ctx, b.AccountID, b.ID, results(statusOf, 0), now)
			return err
		}},
		{"Results", func(e *env, b evs.Batch) error {
			_, err := e.st.Results(e.ctx, b.AccountID, b.ID, -1, 10, "")
			return err
		}},
		{"InputItems", func(e *env, b evs.Batch) error {
			_, _, err := e.st.InputItems(e.ctx, b.AccountID, b.ID, 0, 10)
			return err
		}},
		{"FirstPending", func(e *env, b evs.Batch) error {
			_, err := e.st.FirstPending(e.ctx, b.AccountID, b.ID, -1, 10)
			return err
		}},
		{"ListBatches", func(e *env, b evs.Batch) error {
			bs, err := e.st.ListBatches(e.ctx, b.AccountID, evs.BatchPos{}, 10)
			return listed(bs, err, b.ID)
		}},
		{"UnfinishedBatches", func(e *env, b evs.Batch) error {
			bs, err := e.st.UnfinishedBatches(e.ctx)
			return listed(bs, err, b.ID)
		}},
		{"ActiveBatches", func(e *env, b evs.Batch) error {
			n, err := e.st.ActiveBatches(e.ctx, b.AccountID)
			if err == nil && n != 1 {
				return errUnlisted
			}
			return err
		}},
	}
	e := newEnv(t, newStore)
	e.clock.Set(now)
	for _, op := range ops {
		for _, off := range []time.Duration{time.Millisecond, 0, -time.Millisecond} {
			what := fmt.Sprintf("%s with ExpiresAt now%+v", op.name, off)
			t.Run(what, func(t *testing.T) {
				// Each case its own account, so lists and counts see it alone.
				acct := fmt.Sprintf("acct-%s-%d", op.name, off)
				b, items := newBatch("batch-"+acct, acct, 2, 0)
				b.ExpiresAt = now.Add(off)
				e.clock.Set(base)
				must(t, e.st.CreateBatch(e.ctx, b, items), "CreateBatch")
				e.clock.Set(now)
				err := op.do(e, b)
				if off > 0 {
					must(t, err, what)
					return
				}
				wantError(t, err, evs.CodeNotFound, "No such request.", what)
			})
		}
	}
}

// runAccountNameRules checks that an account's ID and its name each pick
// one account: a creation reusing either is invalid_state and changes
// nothing, the ID checked first.
func runAccountNameRules(t *testing.T, newStore storeFactory) {
	first := evs.Account{ID: "acct-1", Name: "alice", CreatedAt: base}
	for _, c := range []struct {
		name string
		acct evs.Account
		msg  string // "" when the creation is allowed
	}{
		{"NameReused", evs.Account{ID: "acct-2", Name: "alice", Test: true}, "The account name is taken."},
		{"IDReused", evs.Account{ID: "acct-1", Name: "bob"}, "The account already exists."},
		{"BothReused", evs.Account{ID: "acct-1", Name: "alice"}, "The account already exists."},
		{"NameOfAnotherCase", evs.Account{ID: "acct-2", Name: "Alice"}, ""},
		{"Neither", evs.Account{ID: "acct-2", Name: "bob"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, newStore)
			must(t, e.st.CreateAccount(e.ctx, first), "CreateAccount")
			c.acct.CreatedAt = base.Add(time.Minute)
			err := e.st.CreateAccount(e.ctx, c.acct)
			wantAccounts := 2
			if c.msg != "" {
				wantError(t, err, evs.CodeInvalidState, c.msg, "CreateAccount "+c.name)
				wantAccounts = 1
			} else {
				must(t, err, "CreateAccount "+c.name)
				got, err := e.st.AccountByName(e.ctx, c.acct.Name)
				must(t, err, "AccountByName of the new account")
				sameAccount(t, "AccountByName of the new account", got, c.acct)
			}
			got, err := e.st.AccountByName(e.ctx, first.Name)
			must(t, err, "AccountByName of the first account")
			sameAccount(t, "AccountByName of the first account", got, first)
			got, err = e.st.Account(e.ctx, first.ID)
			must(t, err, "Account of the first account")
			sameAccount(t, "Account of the first account", got, first)
			if c.msg != "" && c.acct.ID != first.ID {
				_, err := e.st.Account(e.ctx, c.acct.ID)
				wantError(t, err, evs.CodeNotFound, "No such account.", "Account of the refused account")
			}
			n, err := e.st.CountAccounts(e.ctx)
			must(t, err, "CountAccounts")
			if n != wantAccounts {
				t.Errorf("CountAccounts = %d, want %d", n, wantAccounts)
			}
		})
	}
}
