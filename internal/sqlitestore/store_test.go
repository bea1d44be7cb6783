package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/store/storetest"
)

func open(t testing.TB, dir string, now func() time.Time) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir, now)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return open(t, t.TempDir(), now)
	})
}
