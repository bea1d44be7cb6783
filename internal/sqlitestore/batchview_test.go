package sqlitestore

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// TestBatchViewMatchesBatchAndDelivery checks that the one-statement read
// answers what Batch and Delivery answer separately, in every case the
// envelope distinguishes.
func TestBatchViewMatchesBatchAndDelivery(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), func() time.Time { return t0 })
	mk := func(id string, callback bool) {
		b := evs.Batch{ID: id, AccountID: "a", Mode: "quick", State: evs.StateRunning, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour),
			Counters: evs.Counters{Total: 1}}
		if callback {
			b.CallbackURL = "https://hooks.example.com/" + id
		}
		if err := s.CreateBatch(ctx, b, []evs.Item{{Seq: 0, Email: "u0@d0.example", Domain: "d0.example"}}); err != nil {
			t.Fatal(err)
		}
	}
	mk("running-cb", true)
	mk("done-cb", true)
	mk("done-plain", false)
	for _, id := range []string{"done-cb", "done-plain"} {
		if _, err := s.PutResults(ctx, "a", id, resultsFor(0, 1), t0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ClaimDelivery(ctx, "a", "done-cb", 0, t0, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordDelivery(ctx, evs.Delivery{AccountID: "a", BatchID: "done-cb", State: evs.CallbackPending, Attempts: 1, LastStatus: 503, NextAt: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ account, id string }{
		{"a", "running-cb"}, {"a", "done-cb"}, {"a", "done-plain"}, {"other", "done-cb"}, {"a", "missing"},
	} {
		t.Run(c.account+"/"+c.id, func(t *testing.T) {
			b, d, found, err := s.BatchView(ctx, c.account, c.id)
			wb, werr := s.Batch(ctx, c.account, c.id)
			if evs.ErrorCode(err) != evs.ErrorCode(werr) || !reflect.DeepEqual(b, wb) {
				t.Fatalf("BatchView batch = %+v, %v; Batch = %+v, %v", b, err, wb, werr)
			}
			if werr != nil {
				return
			}
			wd, derr := s.Delivery(ctx, c.account, c.id)
			if found != (derr == nil) || !reflect.DeepEqual(d, wd) {
				t.Fatalf("BatchView delivery = %+v, %v; Delivery = %+v, %v", d, found, wd, derr)
			}
		})
	}
	if _, d, found, _ := s.BatchView(ctx, "a", "done-cb"); !found || d.LastStatus != 503 || d.Attempts != 1 {
		t.Errorf("done-cb delivery = %+v, %v; want the recorded attempt", d, found)
	}
}
