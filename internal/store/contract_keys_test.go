package store_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

func runKeys(t *testing.T, newStore storeFactory) {
	t.Run("CreateAndReadAccount", func(t *testing.T) {
		e := newEnv(t, newStore)
		want := evs.Account{ID: "acct-1", Name: "alice", Test: true, Suspended: true, CreatedAt: base}
		must(t, e.st.CreateAccount(e.ctx, want), "CreateAccount")
		other := evs.Account{ID: "acct-2", Name: "bob", CreatedAt: base.Add(time.Second)}
		must(t, e.st.CreateAccount(e.ctx, other), "CreateAccount other")

		got, err := e.st.Account(e.ctx, "acct-1")
		must(t, err, "Account")
		sameAccount(t, "Account", got, want)
		got, err = e.st.AccountByName(e.ctx, "alice")
		must(t, err, "AccountByName")
		sameAccount(t, "AccountByName", got, want)
		got, err = e.st.AccountByName(e.ctx, "bob")
		must(t, err, "AccountByName bob")
		sameAccount(t, "AccountByName bob", got, other)
	})

	t.Run("AccountNameChecked", func(t *testing.T) {
		e := newEnv(t, newStore)
		for i, name := range []string{"", "my acct", "-lead", "tab\tname", "ümlaut", strings.Repeat("a", 129)} {
			err := e.st.CreateAccount(e.ctx, evs.Account{ID: fmt.Sprintf("acct-%d", i), Name: name, CreatedAt: base})
			wantCode(t, err, evs.CodeInvalidRequest, fmt.Sprintf("CreateAccount named %q", name))
		}
		for i, name := range []string{"a", "acme.io", "team_2-b", strings.Repeat("a", 128)} {
			must(t, e.st.CreateAccount(e.ctx, evs.Account{ID: fmt.Sprintf("ok-%d", i), Name: name, CreatedAt: base}), "CreateAccount "+name)
		}
	})

	t.Run("AccountNotFound", func(t *testing.T) {
		e := newEnv(t, newStore)
		must(t, e.st.CreateAccount(e.ctx, evs.Account{ID: "acct-1", Name: "alice", CreatedAt: base}), "CreateAccount")
		_, err := e.st.Account(e.ctx, "acct-404")
		wantCode(t, err, evs.CodeNotFound, "Account of an unknown id")
		_, err = e.st.AccountByName(e.ctx, "nobody")
		wantCode(t, err, evs.CodeNotFound, "AccountByName of an unknown name")
		// Names and IDs are different namespaces.
		_, err = e.st.AccountByName(e.ctx, "acct-1")
		wantCode(t, err, evs.CodeNotFound, "AccountByName of an account ID")
	})

	t.Run("CountAccounts", func(t *testing.T) {
		e := newEnv(t, newStore)
		for i := range 4 {
			n, err := e.st.CountAccounts(e.ctx)
			must(t, err, "CountAccounts")
			if n != i {
				t.Fatalf("CountAccounts = %d, want %d", n, i)
			}
			a := evs.Account{ID: fmt.Sprintf("acct-%d", i), Name: fmt.Sprintf("n%d", i), CreatedAt: base}
			must(t, e.st.CreateAccount(e.ctx, a), "CreateAccount")
		}
	})

	t.Run("PublishableKeyKindAndOrigins", func(t *testing.T) {
		// Kind, origins and rate limits round-trip through create,
		// lookup, revoke and list; a secret key keeps none of them.
		e := newEnv(t, newStore)
		must(t, e.st.CreateAccount(e.ctx, evs.Account{ID: "acct-1", Name: "alice", CreatedAt: base}), "CreateAccount")
		pk := testKey(1, "acct-1", base)
		pk.Kind, pk.Origins = evs.KeyPublishable, []string{"https://shop.example", "http://localhost:8080"}
		pk.Limits = evs.KeyLimits{PerAddress: 7, PerKey: 1200}
		secret := testKey(2, "acct-1", base.Add(time.Second))
		must(t, e.st.CreateKey(e.ctx, pk), "CreateKey publishable")
		must(t, e.st.CreateKey(e.ctx, secret), "CreateKey secret")
		got, err := e.st.KeyByHash(e.ctx, pk.Hash)
		must(t, err, "KeyByHash")
		sameKey(t, "KeyByHash publishable", got, pk)
		got, err = e.st.KeyByHash(e.ctx, secret.Hash)
		must(t, err, "KeyByHash secret")
		sameKey(t, "KeyByHash secret", got, secret)
		ks, err := e.st.ListKeys(e.ctx)
		must(t, err, "ListKeys")
		if len(ks) != 2 {
			t.Fatalf("ListKeys = %d keys, want 2", len(ks))
		}
		sameKey(t, "ListKeys[0]", ks[0], pk)
		got, err = e.st.RevokeKey(e.ctx, pk.ID, base.Add(time.Minute))
		must(t, err, "RevokeKey")
		pk.Revoked, pk.RevokedAt = true, base.Add(time.Minute)
		sameKey(t, "RevokeKey", got, pk)
	})

	t.Run("CreateKeyAndKeyByHash", func(t *testing.T) {
		e := newEnv(t, newStore)
		must(t, e.st.CreateAccount(e.ctx, evs.Account{ID: "acct-1", Name: "alice", CreatedAt: base}), "CreateAccount")
		want := testKey(1, "acct-1", base)
		want.UsageKeyID = "usage-123"
		must(t, e.st.CreateKey(e.ctx, want), "CreateKey")
		got, err := e.st.KeyByHash(e.ctx, want.Hash)
		must(t, err, "KeyByHash")
		sameKey(t, "KeyByHash", got, want)

		_, err = e.st.KeyByHash(e.ctx, testKey(2, "acct-1", base).Hash)
		wantCode(t, err, evs.CodeNotFound, "KeyByHash of an unknown hash")
		_, err = e.st.KeyByHash(e.ctx, want.ID)
		wantCode(t, err, evs.CodeNotFound, "KeyByHash of a key ID")
	})

	t.Run("CreateKeyNeedsAccount", func(t *testing.T) {
		e := newEnv(t, newStore)
		err := e.st.CreateKey(e.ctx, testKey(1, "acct-404", base))
		if err == nil {
			t.Fatal("CreateKey for an unknown account: got no error")
		}
		_, err = e.st.KeyByHash(e.ctx, testKey(1, "acct-404", base).Hash)
		wantCode(t, err, evs.CodeNotFound, "KeyByHash after the failed CreateKey")
	})

	t.Run("DuplicateKeyIsAnError", func(t *testing.T) {
		e := newEnv(t, newStore)
		must(t, e.st.CreateAccount(e.ctx, evs.Account{ID: "acct-1", Name: "alice", CreatedAt: base}), "CreateAccount")
		must(t, e.st.CreateAccount(e.ctx, evs.Account{ID: "acct-2", Name: "bob", CreatedAt: base}), "CreateAccount")
		k := testKey(1, "acct-1", base)
		must(t, e.st.CreateKey(e.ctx, k), "CreateKey")
		if err := e.st.CreateKey(e.ctx, testKey(1, "acct-2", base.Add(time.Hour))); err == nil {
			t.Fatal("second CreateKey with the same hash: got no error")
		}
		got, err := e.st.KeyByHash(e.ctx, k.Hash)
		must(t, err, "KeyByHash")
		sameKey(t, "KeyByHash after the failed duplicate", got, k)
	})

	t.Run("RevokeKey", func(t *testing.T) {
		for _, by := range []string{"id", "hash"} {
			t.Run("By"+by, func(t *testing.T) {
				e := newEnv(t, newStore)
				must(t, e.st.CreateAccount(e.ctx, evs.Account{ID: "acct-1", Name: "alice", CreatedAt: base}), "CreateAccount")
				k := testKey(1, "acct-1", base)
				other := testKey(2, "acct-1", base)
				must(t, e.st.CreateKey(e.ctx, k), "CreateKey")
				must(t, e.st.CreateKey(e.ctx, other), "CreateKey other")
				ref := k.ID
				if by == "hash" {
					ref = k.Hash
				}
				at := base.Add(3 * time.Hour)
				got, err := e.st.RevokeKey(e.ctx, ref, at)
				must(t, err, "RevokeKey")
				want := k
				want.Revoked, want.RevokedAt = true, at
				sameKey(t, "RevokeKey result", got, want)
				got, err = e.st.KeyByHash(e.ctx, k.Hash)
				must(t, err, "KeyByHash")
				sameKey(t, "KeyByHash after RevokeKey", got, want)

				// Revoking twice is not an error and leaves the key revoked.
				got, err = e.st.RevokeKey(e.ctx, ref, at.Add(time.Hour))
				must(t, err, "second RevokeKey")
				if !got.Revoked || got.Hash != k.Hash {
					t.Errorf("second RevokeKey = %+v, want key %s revoked", got, k.ID)
				}

				// The other key is untouched.
				got, err = e.st.KeyByHash(e.ctx, other.Hash)
				must(t, err, "KeyByHash other")
				sameKey(t, "other key", got, other)
			})
		}
	})

	t.Run("RevokeUnknownKey", func(t *testing.T) {
		e := newEnv(t, newStore)
		must(t, e.st.CreateAccount(e.ctx, evs.Account{ID: "acct-1", Name: "alice", CreatedAt: base}), "CreateAccount")
		must(t, e.st.CreateKey(e.ctx, testKey(1, "acct-1", base)), "CreateKey")
		for _, ref := range []string{testKey(9, "", base).ID, testKey(9, "", base).Hash, ""} {
			_, err := e.st.RevokeKey(e.ctx, ref, base)
			wantCode(t, err, evs.CodeNotFound, fmt.Sprintf("RevokeKey(%q)", ref))
		}
	})

	t.Run("ListKeysOldestFirst", func(t *testing.T) {
		e := newEnv(t, newStore)
		keys, err := e.st.ListKeys(e.ctx)
		must(t, err, "ListKeys on an empty store")
		if len(keys) != 0 {
			t.Fatalf("ListKeys on an empty store = %d keys, want 0", len(keys))
		}
		must(t, e.st.CreateAccount(e.ctx, evs.Account{ID: "acct-1", Name: "alice", CreatedAt: base}), "CreateAccount")
		must(t, e.st.CreateAccount(e.ctx, evs.Account{ID: "acct-2", Name: "bob", CreatedAt: base}), "CreateAccount")
		// Written out of time order, so insertion order is not the answer.
		offsets := []int{3, 0, 4, 1, 2}
		for i, off := range offsets {
			acct := "acct-1"
			if i%2 == 1 {
				acct = "acct-2"
			}
			must(t, e.st.CreateKey(e.ctx, testKey(off, acct, base.Add(time.Duration(off)*time.Minute))), "CreateKey")
		}
		_, err = e.st.RevokeKey(e.ctx, testKey(1, "", base).ID, base.Add(time.Hour))
		must(t, err, "RevokeKey")
		keys, err = e.st.ListKeys(e.ctx)
		must(t, err, "ListKeys")
		if len(keys) != len(offsets) {
			t.Fatalf("ListKeys = %d keys, want %d (revoked keys are listed too)", len(keys), len(offsets))
		}
		for i, k := range keys {
			if want := testKey(i, "", base).Hash; k.Hash != want {
				t.Errorf("ListKeys[%d] = key %s created %v, want key %s", i, k.ID, k.CreatedAt, testKey(i, "", base).ID)
			}
			if k.Revoked != (i == 1) {
				t.Errorf("ListKeys[%d].Revoked = %v", i, k.Revoked)
			}
		}
	})
}

// testKey returns a distinct, well-formed key for n: a 64-hex hash whose
// first 12 characters are its ID, as authorizer.KeyID makes them.
func testKey(n int, accountID string, created time.Time) evs.Key {
	// The hashes' order is not their n's order, so sorting by hash is
	// not mistaken for sorting by age.
	h := fmt.Sprintf("%08x", uint32(n+1)*0x9e3779b1)
	for len(h) < 64 {
		h += fmt.Sprintf("%x", (len(h)*7+n)%16)
	}
	return evs.Key{ID: h[:12], Hash: h, AccountID: accountID, CreatedAt: created}
}

func sameAccount(t *testing.T, what string, got, want evs.Account) {
	t.Helper()
	if got.ID != want.ID || got.Name != want.Name || got.Test != want.Test || got.Suspended != want.Suspended {
		t.Errorf("%s = %+v, want %+v", what, got, want)
	}
	sameTime(t, what+".CreatedAt", got.CreatedAt, want.CreatedAt)
}

func sameKey(t *testing.T, what string, got, want evs.Key) {
	t.Helper()
	if got.ID != want.ID || got.Hash != want.Hash || got.AccountID != want.AccountID ||
		got.Revoked != want.Revoked || got.UsageKeyID != want.UsageKeyID ||
		got.Kind != want.Kind || !slices.Equal(got.Origins, want.Origins) || got.Limits != want.Limits {
		t.Errorf("%s = %+v, want %+v", what, got, want)
	}
	sameTime(t, what+".CreatedAt", got.CreatedAt, want.CreatedAt)
	if want.RevokedAt.IsZero() {
		if !got.RevokedAt.IsZero() {
			t.Errorf("%s.RevokedAt = %v, want zero", what, got.RevokedAt)
		}
	} else {
		sameTime(t, what+".RevokedAt", got.RevokedAt, want.RevokedAt)
	}
}
