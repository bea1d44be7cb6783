package dynamostore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// TestInputPlanOrder: a batch's input is read in plan order. A list in the
// order users upload it (domains taking turns) comes out with each small
// domain's addresses together, and a large domain's addresses in packs of
// 200 spread over the whole input, so every window the planner reads holds
// the large provider's share and the rest of the batch never waits behind
// it. Every item comes out once.
func TestInputPlanOrder(t *testing.T) {
	t.Parallel()
	st := newStore(t, func() time.Time { return t0 })
	ctx := context.Background()
	// 1,000 addresses at big.example (five packs) and 300 domains of 3.
	var items []evs.Item
	small := 0
	for i := range 1900 {
		d := "big.example"
		if i%19 >= 10 {
			d = fmt.Sprintf("s%d.example", small%300)
			small++
		}
		items = append(items, evs.Item{Seq: i, Email: fmt.Sprintf("u%d@%s", i, d), Domain: d})
	}
	b := evs.Batch{ID: "b-order", AccountID: "acct", Mode: "quick", State: evs.StateQueued,
		CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), Counters: evs.Counters{Total: len(items)}}
	if err := st.CreateBatch(ctx, b, items); err != nil {
		t.Fatal(err)
	}
	const window = 380 // a fifth of the batch
	seen := map[int]bool{}
	for from := 0; from >= 0; {
		page, next, err := st.InputItems(ctx, "acct", b.ID, from, window)
		if err != nil {
			t.Fatal(err)
		}
		big, domains := 0, map[string]bool{}
		for i, it := range page {
			if seen[it.Seq] || it != items[it.Seq] {
				t.Fatalf("item %+v: repeated, or not the one created", it)
			}
			seen[it.Seq] = true
			if it.Domain == "big.example" {
				big++
			} else if domains[it.Domain] && page[i-1].Domain != it.Domain {
				t.Errorf("window at %d: %s's addresses apart", from, it.Domain)
			}
			domains[it.Domain] = true
		}
		if big != 200 {
			t.Errorf("window at %d: %d addresses of the large domain, want its share, 200", from, big)
		}
		from = next
	}
	if len(seen) != len(items) {
		t.Fatalf("read %d items, want %d", len(seen), len(items))
	}
}
