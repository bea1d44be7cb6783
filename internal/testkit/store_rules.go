package testkit

// The rules the two stores must share, one table each: that an account
// name picks one account. Messages are pinned word for word: a client
// reads the same reply whichever deployment answers.

import (
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

func runRules(t *testing.T, newStore StoreFactory) {
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

// runAccountNameRules checks that an account's ID and its name each pick
// one account: a creation reusing either is invalid_state and changes
// nothing, the ID checked first.
func runAccountNameRules(t *testing.T, newStore StoreFactory) {
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
