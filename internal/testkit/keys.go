package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// SeededKeys holds one API key per situation the key lookup tells apart.
type SeededKeys struct {
	Live, Test, Revoked, Suspended, Usage string
}

// SeedKeys stores three accounts (acct-live, acct-test in test mode,
// acct-susp suspended) and one key for each case of SeededKeys in st: the
// fixture of the key lookup's tests, on AWS and on `evs serve` alike.
func SeedKeys(t testing.TB, st store.Keys, now time.Time) SeededKeys {
	t.Helper()
	ctx := context.Background()
	for _, a := range []evs.Account{
		{ID: "acct-live", Name: "live"},
		{ID: "acct-test", Name: "test", Test: true},
		{ID: "acct-susp", Name: "suspended", Suspended: true},
	} {
		a.CreatedAt = now
		if err := st.CreateAccount(ctx, a); err != nil {
			t.Fatalf("create account: %v", err)
		}
	}
	newKey := func(account, usage string) string {
		k, err := authorizer.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		h := authorizer.HashKey(k)
		if err := st.CreateKey(ctx, evs.Key{ID: authorizer.KeyID(h), Hash: h, AccountID: account, CreatedAt: now, UsageKeyID: usage}); err != nil {
			t.Fatalf("create key: %v", err)
		}
		return k
	}
	ks := SeededKeys{
		Live:      newKey("acct-live", ""),
		Test:      newKey("acct-test", ""),
		Revoked:   newKey("acct-live", ""),
		Suspended: newKey("acct-susp", ""),
		Usage:     newKey("acct-live", "usage-key-1"),
	}
	if _, err := st.RevokeKey(ctx, authorizer.HashKey(ks.Revoked), now); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	return ks
}
