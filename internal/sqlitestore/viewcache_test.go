package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// TestBatchViewCacheFollowsWrites: on a serving store, whose batch views
// are kept in memory, every write to a batch or its delivery shows in
// the next BatchView, and an expired batch is gone although its view was
// kept.
func TestBatchViewCacheFollowsWrites(t *testing.T) {
	ctx := context.Background()
	var (
		mu  sync.Mutex
		now = t0
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, err := OpenServing(ctx, t.TempDir(), clock)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.views == nil {
		t.Fatal("a serving store keeps no views")
	}
	b := evs.Batch{ID: "b1", AccountID: "a", Mode: "quick", State: evs.StateRunning, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour),
		Counters: evs.Counters{Total: 2}, CallbackURL: "https://hooks.example.com/b1"}
	items := []evs.Item{{Seq: 0, Email: "u0@d0.example", Domain: "d0.example"}, {Seq: 1, Email: "u1@d0.example", Domain: "d0.example"}}
	if err := s.CreateBatch(ctx, b, items); err != nil {
		t.Fatal(err)
	}
	view := func(step string) (evs.Batch, evs.Delivery, bool) {
		t.Helper()
		// Twice: the second may come from memory, and must agree.
		b1, d1, f1, err := s.BatchView(ctx, "a", "b1")
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		b2, d2, f2, err := s.BatchView(ctx, "a", "b1")
		if err != nil || b1.Counters != b2.Counters || b1.State != b2.State || d1 != d2 || f1 != f2 {
			t.Fatalf("%s: a repeated view differs: %+v %+v %v / %+v %+v %v (%v)", step, b1, d1, f1, b2, d2, f2, err)
		}
		return b1, d1, f1
	}
	if got, _, found := view("running"); got.Counters.Processed != 0 || found {
		t.Fatalf("running: processed %d, delivery %v", got.Counters.Processed, found)
	}
	if _, err := s.PutResults(ctx, "a", "b1", resultsFor(0, 1), t0); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := view("one result"); got.Counters.Processed != 1 || got.State != evs.StateRunning {
		t.Fatalf("one result: %+v", got)
	}
	if _, err := s.PutResults(ctx, "a", "b1", resultsFor(1, 2), t0); err != nil {
		t.Fatal(err)
	}
	got, d, found := view("completed")
	if got.State != evs.StateCompleted || !found || d.State != evs.CallbackPending || d.Attempts != 0 {
		t.Fatalf("completed: %+v, delivery %+v %v", got, d, found)
	}
	if _, err := s.ClaimDelivery(ctx, "a", "b1", 0, t0, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, d, _ := view("claimed"); d.Attempts != 1 {
		t.Fatalf("claimed: delivery %+v", d)
	}
	if err := s.RecordDelivery(ctx, evs.Delivery{AccountID: "a", BatchID: "b1", State: evs.CallbackDelivered, Attempts: 1, LastStatus: 200, NextAt: t0}); err != nil {
		t.Fatal(err)
	}
	if _, d, _ := view("delivered"); d.State != evs.CallbackDelivered || d.LastStatus != 200 {
		t.Fatalf("delivered: delivery %+v", d)
	}
	// Another account never sees the kept view.
	if _, _, _, err := s.BatchView(ctx, "other", "b1"); evs.ErrorCode(err) != evs.CodeNotFound {
		t.Fatalf("another account's view: %v", err)
	}
	mu.Lock()
	now = t0.Add(time.Hour)
	mu.Unlock()
	if _, _, _, err := s.BatchView(ctx, "a", "b1"); evs.ErrorCode(err) != evs.CodeNotFound {
		t.Fatalf("expired batch: %v, want not found", err)
	}
}

// TestViewCacheRefusesViewsReadBeforeAWrite: a view whose read began before
// a write to its batch returned is never kept, whatever the order in which
// the read and the write finish; nor is one read before the cache was
// emptied.
func TestViewCacheRefusesViewsReadBeforeAWrite(t *testing.T) {
	k := viewKey{"a", "b"}
	final := batchView{b: evs.Batch{State: evs.StateCompleted, ExpiresAt: t0.Add(time.Hour)}}
	tests := []struct {
		name string
		run  func(t *testing.T, c *viewCache)
		kept bool
	}{
		{"read then put", func(_ *testing.T, c *viewCache) { c.put(k, final, c.begin()) }, true},
		{"write during the read", func(_ *testing.T, c *viewCache) { r := c.begin(); c.wrote("a", "b"); c.put(k, final, r) }, false},
		{"write before the read", func(_ *testing.T, c *viewCache) { c.wrote("a", "b"); c.put(k, final, c.begin()) }, true},
		{"kept, then written", func(_ *testing.T, c *viewCache) { c.put(k, final, c.begin()); c.wrote("a", "b") }, false},
		{"write to another batch", func(_ *testing.T, c *viewCache) { r := c.begin(); c.wrote("a", "other"); c.put(k, final, r) }, true},
		{"emptied during the read", func(_ *testing.T, c *viewCache) { r := c.begin(); c.wroteAll(); c.put(k, final, r) }, false},
		{"filled up during the read", func(_ *testing.T, c *viewCache) {
			r := c.begin()
			for i := range maxViews + 1 {
				c.wrote("a", fmt.Sprint(i))
			}
			c.put(k, final, r)
		}, false},
		{"a running batch is kept until written", func(t *testing.T, c *viewCache) {
			c.put(k, batchView{b: evs.Batch{State: evs.StateRunning, ExpiresAt: t0.Add(time.Hour)}}, c.begin())
			if _, ok := c.get(k, t0); !ok {
				t.Fatal("a running batch's view was not kept")
			}
			c.wrote("a", "b")
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newViewCache()
			tt.run(t, c)
			if _, ok := c.get(k, t0); ok != tt.kept {
				t.Fatalf("kept = %v, want %v", ok, tt.kept)
			}
		})
	}
}
