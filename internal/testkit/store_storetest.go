package testkit

// The store contract suite: every store.Store implementation (the embedded
// SQLite store and the DynamoDB adapter) calls RunStoreContract from its own
// tests, so both behave the same way behind the service.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// StoreFactory makes a fresh, empty store whose clock is now.
type StoreFactory func(t *testing.T, now func() time.Time) store.Store

// RunStoreContract runs the store contract against implementations made by newStore.
// newStore returns a fresh, empty store whose clock is now (tests move it to
// check expiry). Every subtest gets its own store.
func RunStoreContract(t *testing.T, newStore func(t *testing.T, now func() time.Time) store.Store) {
	t.Run("Keys", func(t *testing.T) { runKeys(t, newStore) })
	t.Run("Idempotency", func(t *testing.T) { runIdempotency(t, newStore) })
	t.Run("Batches", func(t *testing.T) { runBatches(t, newStore) })
	t.Run("ListBatches", func(t *testing.T) { runListing(t, newStore) })
	t.Run("Webhooks", func(t *testing.T) { runWebhooks(t, newStore) })
	t.Run("Rules", func(t *testing.T) { runRules(t, newStore) })
}

// base is the suite's starting time. It has whole milliseconds so that stores
// keeping millisecond precision round-trip it exactly.
var base = time.Date(2026, 11, 22, 10, 4, 5, 123_000_000, time.UTC)

// env is one subtest's fresh store and its clock.
type env struct {
	ctx   context.Context
	clock *Clock
	st    store.Store
}

func newEnv(t *testing.T, newStore StoreFactory) *env {
	t.Helper()
	clk := NewClock(base)
	st := newStore(t, clk.Now)
	if st == nil {
		t.Fatal("newStore returned nil")
	}
	return &env{ctx: context.Background(), clock: clk, st: st}
}

// wantCode fails t unless err carries the evs error code want.
func wantCode(t *testing.T, err error, want, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got no error, want code %q", what, want)
	}
	if got := evs.ErrorCode(err); got != want {
		t.Fatalf("%s: got error %v (code %q), want code %q", what, err, got, want)
	}
	var e *evs.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %v is not an *evs.Error", what, err)
	}
}

// must fails t on a non-nil err.
func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// sameTime fails t unless got and want are the same instant.
func sameTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
