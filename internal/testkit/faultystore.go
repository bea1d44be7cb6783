package testkit

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// EmbeddedStore is the method set of the embedded store as `evs serve`
// uses it (server.Store): the store, due webhook deliveries and the sweep.
type EmbeddedStore interface {
	store.Store
	store.DueDeliveries
	Sweep(ctx context.Context) (int, error)
}

// FaultyStore wraps a store and fails PutResults and PendingItems with
// CodeUnavailable while Down is set, as a full disk does; Fails counts the
// calls it refused. The local batch queue's and the server's fault tests share
// it.
type FaultyStore struct {
	EmbeddedStore
	Down  atomic.Bool
	Fails atomic.Int64
	// ReadsDown, while set, fails Batch too: an API call the store fails.
	ReadsDown atomic.Bool
}

// Batch fails while ReadsDown is set.
func (f *FaultyStore) Batch(ctx context.Context, accountID, id string) (evs.Batch, error) {
	if f.ReadsDown.Load() {
		f.Fails.Add(1)
		return evs.Batch{}, evs.Errorf(evs.CodeUnavailable, "the disk failed a read")
	}
	return f.EmbeddedStore.Batch(ctx, accountID, id)
}

// PutResults fails while the store is down.
func (f *FaultyStore) PutResults(ctx context.Context, accountID, id string, rs []evs.Result, now time.Time) (evs.Batch, error) {
	if f.Down.Load() {
		f.Fails.Add(1)
		return evs.Batch{}, evs.Errorf(evs.CodeUnavailable, "disk full")
	}
	return f.EmbeddedStore.PutResults(ctx, accountID, id, rs, now)
}

// PendingItems fails while the store is down.
func (f *FaultyStore) PendingItems(ctx context.Context, accountID, id string, after, limit int) ([]evs.Item, error) {
	if f.Down.Load() {
		f.Fails.Add(1)
		return nil, evs.Errorf(evs.CodeUnavailable, "disk full")
	}
	return f.EmbeddedStore.PendingItems(ctx, accountID, id, after, limit)
}

// Ping fails while the store is down (the health check of `evs serve`),
// else asks the wrapped store, when it can be asked.
func (f *FaultyStore) Ping(ctx context.Context) error {
	if f.Down.Load() {
		return evs.Errorf(evs.CodeUnavailable, "disk full")
	}
	if p, ok := f.EmbeddedStore.(interface{ Ping(context.Context) error }); ok {
		return p.Ping(ctx)
	}
	_, err := f.EmbeddedStore.CountAccounts(ctx)
	return err
}

// ProbeWrite fails while the store is down (the readiness check of `evs
// serve`), else asks the wrapped store, when it can be asked.
func (f *FaultyStore) ProbeWrite(ctx context.Context) error {
	if f.Down.Load() {
		return evs.Errorf(evs.CodeUnavailable, "disk full")
	}
	if p, ok := f.EmbeddedStore.(interface{ ProbeWrite(context.Context) error }); ok {
		return p.ProbeWrite(ctx)
	}
	return nil
}
