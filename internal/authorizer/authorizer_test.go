package authorizer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

// keys holds one key per situation, seeded into a real store.
type keys struct {
	live, test, revoked, suspended, usage string
}

func seed(t testing.TB) (*sqlitestore.Store, keys) {
	t.Helper()
	ctx := context.Background()
	clock := testkit.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	st, err := sqlitestore.Open(ctx, t.TempDir(), clock.Now)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for _, a := range []evs.Account{
		{ID: "acct-live", Name: "live"},
		{ID: "acct-test", Name: "test", Test: true},
		{ID: "acct-susp", Name: "suspended", Suspended: true},
	} {
		a.CreatedAt = clock.Now()
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
		if err := st.CreateKey(ctx, evs.Key{ID: authorizer.KeyID(h), Hash: h, AccountID: account, CreatedAt: clock.Now(), UsageKeyID: usage}); err != nil {
			t.Fatalf("create key: %v", err)
		}
		return k
	}
	ks := keys{
		live:      newKey("acct-live", ""),
		test:      newKey("acct-test", ""),
		revoked:   newKey("acct-live", ""),
		suspended: newKey("acct-susp", ""),
		usage:     newKey("acct-live", "usage-key-1"),
	}
	if _, err := st.RevokeKey(ctx, authorizer.HashKey(ks.revoked), clock.Now()); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	return st, ks
}

func keyID(k string) string { return authorizer.KeyID(authorizer.HashKey(k)) }

func TestAuthorize(t *testing.T) {
	st, ks := seed(t)
	az := authorizer.New(st)
	tests := []struct {
		name string
		key  string
		want error
		p    authorizer.Principal
	}{
		{"empty", "", authorizer.ErrUnauthorized, authorizer.Principal{}},
		{"malformed", "evs.short", authorizer.ErrUnauthorized, authorizer.Principal{}},
		{"revoked", ks.revoked, authorizer.ErrForbidden, authorizer.Principal{AccountID: "acct-live", KeyID: keyID(ks.revoked)}},
		{"suspended", ks.suspended, authorizer.ErrForbidden, authorizer.Principal{AccountID: "acct-susp", KeyID: keyID(ks.suspended)}},
		{"live", ks.live, nil, authorizer.Principal{AccountID: "acct-live", KeyID: keyID(ks.live)}},
		{"test", ks.test, nil, authorizer.Principal{AccountID: "acct-test", KeyID: keyID(ks.test), Test: true}},
		{"usage", ks.usage, nil, authorizer.Principal{AccountID: "acct-live", KeyID: keyID(ks.usage), UsageKeyID: "usage-key-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := az.Authorize(context.Background(), tt.key)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
			if p != tt.p {
				t.Fatalf("principal %+v, want %+v", p, tt.p)
			}
		})
	}
}

func TestAccountMissing(t *testing.T) {
	st, ks := seed(t)
	// A store that lost the key's account: the key resolves to no one.
	az := authorizer.New(lostAccounts{st})
	if _, err := az.Authorize(context.Background(), ks.live); !errors.Is(err, authorizer.ErrUnauthorized) {
		t.Fatalf("key without account: %v", err)
	}
}

type lostAccounts struct{ *sqlitestore.Store }

func (l lostAccounts) Account(ctx context.Context, _ string) (evs.Account, error) {
	return l.Store.Account(ctx, "no-such-account")
}
