package authorizer_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

// seed opens a store holding testkit.SeedKeys's accounts and keys.
func seed(t testing.TB) (*sqlitestore.Store, testkit.SeededKeys) {
	t.Helper()
	clock := testkit.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	st, err := sqlitestore.Open(context.Background(), t.TempDir(), clock.Now)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, testkit.SeedKeys(t, st, clock.Now())
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
		{"revoked", ks.Revoked, authorizer.ErrForbidden, authorizer.Principal{AccountID: "acct-live", KeyID: keyID(ks.Revoked)}},
		{"suspended", ks.Suspended, authorizer.ErrForbidden, authorizer.Principal{AccountID: "acct-susp", KeyID: keyID(ks.Suspended)}},
		{"live", ks.Live, nil, authorizer.Principal{AccountID: "acct-live", KeyID: keyID(ks.Live)}},
		{"test", ks.Test, nil, authorizer.Principal{AccountID: "acct-test", KeyID: keyID(ks.Test), Test: true}},
		{"usage", ks.Usage, nil, authorizer.Principal{AccountID: "acct-live", KeyID: keyID(ks.Usage), UsageKeyID: "usage-key-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := az.Authorize(context.Background(), tt.key)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
			if !reflect.DeepEqual(p, tt.p) {
				t.Fatalf("principal %+v, want %+v", p, tt.p)
			}
		})
	}
}

func TestAccountMissing(t *testing.T) {
	st, ks := seed(t)
	// A store that lost the key's account: the key resolves to no one.
	az := authorizer.New(lostAccounts{st})
	if _, err := az.Authorize(context.Background(), ks.Live); !errors.Is(err, authorizer.ErrUnauthorized) {
		t.Fatalf("key without account: %v", err)
	}
}

type lostAccounts struct{ *sqlitestore.Store }

func (l lostAccounts) Account(ctx context.Context, _ string) (evs.Account, error) {
	return l.Store.Account(ctx, "no-such-account")
}
