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

// FaultyStore wraps a store and fails PutResults and the reads of pending
// items (InputItems, WithoutResults) with CodeUnavailable while Down is
// set, as a full disk does; Fails counts the calls it refused. The local
// batch queue's and the server's fault tests share it.
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
	if err := f.down(); err != nil {
		return evs.Batch{}, err
	}
	return f.EmbeddedStore.PutResults(ctx, accountID, id, rs, now)
}

// InputItems fails while the store is down.
func (f *FaultyStore) InputItems(ctx context.Context, accountID, id string, from, limit int) ([]evs.Item, int, error) {
	if err := f.down(); err != nil {
		return nil, -1, err
	}
	return f.EmbeddedStore.InputItems(ctx, accountID, id, from, limit)
}

// WithoutResults fails while the store is down.
func (f *FaultyStore) WithoutResults(ctx context.Context, accountID, id string, items []evs.Item) ([]evs.Item, error) {
	if err := f.down(); err != nil {
		return nil, err
	}
	return f.EmbeddedStore.WithoutResults(ctx, accountID, id, items)
}

func (f *FaultyStore) down() error {
	if !f.Down.Load() {
		return nil
	}
	f.Fails.Add(1)
	return evs.Errorf(evs.CodeUnavailable, "disk full")
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
