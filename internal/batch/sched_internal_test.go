package batch

import (
	"fmt"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/evs"
)

// TestLaneFairOrder checks the order in which one slot is handed out:
// round-robin across accounts, then across each account's batches, whatever
// the number of messages each batch has queued.
func TestLaneFairOrder(t *testing.T) {
	t.Parallel()
	var order []delivery
	l := evs.NewFair(1, 1, 1, func(d delivery) { order = append(order, d) })
	for _, b := range []struct {
		acct, id string
		n        int
	}{{"A", "a1", 4}, {"A", "a2", 4}, {"A", "a3", 4}, {"B", "b1", 3}, {"C", "c1", 1}} {
		for range b.n {
			l.Push(b.acct, b.id, delivery{m: Message{AccountID: b.acct, BatchID: b.id}})
		}
	}
	// One slot: each handled message lets the next one start.
	for len(order) < 16 {
		n := len(order)
		l.Done(order[n-1].m.AccountID, order[n-1].m.BatchID)
		if len(order) == n {
			break
		}
	}
	var ids []string
	for _, d := range order {
		ids = append(ids, d.m.BatchID)
	}
	got := strings.Join(ids, " ")
	want := "a1 b1 c1 a2 b1 a3 b1 a1 a2 a3 a1 a2 a3 a1 a2 a3"
	if got != want {
		t.Fatalf("order\n got %s\nwant %s", got, want)
	}
}

// TestLanePerAccountCap checks that an account never holds more than its
// share of slots, so an account that arrives later finds a free one at once,
// and that a lane's slots are all used when only one account has work.
func TestLanePerAccountCap(t *testing.T) {
	t.Parallel()
	running := map[string]int{}
	l := evs.NewFair(8, 6, 8, func(d delivery) { running[d.m.AccountID]++ })
	for range 100 {
		l.Push("hog", "h", delivery{m: Message{AccountID: "hog", BatchID: "h"}})
	}
	if running["hog"] != 6 {
		t.Fatalf("hog holds %d slots, want its cap 6", running["hog"])
	}
	for range 5 {
		l.Push("late", "l", delivery{m: Message{AccountID: "late", BatchID: "l"}})
	}
	if running["late"] != 2 {
		t.Fatalf("late account got %d slots, want the 2 left free", running["late"])
	}
}

// TestRetryDelay checks the fault back-off: it grows, stays under its cap
// and is jittered.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for n := range 20 {
		d := RetryDelay(100e6, 5e9, n)
		want := min(int64(100e6)<<n, int64(5e9))
		if n > 40 {
			want = 5e9
		}
		if int64(d) < want/2 || int64(d) > want {
			t.Fatalf("attempt %d: delay %v outside [%v, %v]", n, d, want/2, want)
		}
		seen[fmt.Sprint(d)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("delays look unjittered: %v", seen)
	}
}
