package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

// TestKeysVersion: the keys version stays while keys and accounts stay,
// whatever else is written, and changes with every write to them, whether
// this store or another handle on the same directory (another process)
// made it; a closed store has none.
func TestKeysVersion(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.OpenServing(ctx, dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := sqlitestore.Open(ctx, dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	version := func() int64 {
		t.Helper()
		v, err := st.KeysVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v0 := version()
	if err := st.CreateAccount(ctx, evs.Account{ID: "a1", Name: "one", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	v1 := version()
	if v1 == v0 {
		t.Fatal("an account made by this store left the version as it was")
	}
	key, err := authorizer.IssueKey(ctx, other, "a1", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	v2 := version()
	if v2 == v1 {
		t.Fatal("a key made by another handle left the version as it was")
	}
	// Other writes (a batch, a webhook secret) are no change of keys.
	b := evs.Batch{ID: "b1", AccountID: "a1", Mode: evs.ModeQuick, State: evs.StateQueued, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour), Counters: evs.Counters{Total: 1}}
	if err := st.CreateBatch(ctx, b, []evs.Item{{Seq: 0, Email: "a@x.example", Domain: "x.example"}}); err != nil {
		t.Fatal(err)
	}
	if err := other.PutWebhookSecret(ctx, evs.WebhookSecret{AccountID: "a1", Current: "whsec_x"}, ""); err != nil {
		t.Fatal(err)
	}
	if v := version(); v != v2 {
		t.Fatal("writes to other tables moved the keys version")
	}
	for _, revoker := range []*sqlitestore.Store{other, st} {
		before := version()
		if _, err := revoker.RevokeKey(ctx, authorizer.HashKey(key), time.Now()); err != nil {
			t.Fatal(err)
		}
		if v := version(); v == before {
			t.Fatal("a revocation left the version as it was")
		}
	}
	st.Close()
	if _, err := st.KeysVersion(ctx); err == nil {
		t.Fatal("a closed store answered a version")
	}
}
