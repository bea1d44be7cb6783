package batch

import (
	"fmt"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/evs"
)

// TestLaneFairOrder checks the order in which one slot is handed out:
// round-robin across accounts, then across each account's batches, whatever
// the number of tasks each batch has queued.
func TestLaneFairOrder(t *testing.T) {
	var order []string
	l := newLane(1, 1, 1, func(tk task) { order = append(order, tk.run.b.ID) })
	mk := func(acct, id string, n int) *batchRun {
		br := &batchRun{b: evs.Batch{AccountID: acct, ID: id}}
		l.add(br)
		for range n {
			br.ready = append(br.ready, task{run: br})
		}
		return br
	}
	runs := []*batchRun{mk("A", "a1", 4), mk("A", "a2", 4), mk("A", "a3", 4), mk("B", "b1", 3), mk("C", "c1", 1)}
	// One slot: each finished task lets the next one start.
	l.dispatch()
	for len(order) < 16 {
		last := order[len(order)-1]
		var br *batchRun
		for _, r := range runs {
			if r.b.ID == last {
				br = r
			}
		}
		n := len(order)
		l.done(task{run: br})
		if len(order) == n {
			break
		}
	}
	got := strings.Join(order, " ")
	want := "a1 b1 c1 a2 b1 a3 b1 a1 a2 a3 a1 a2 a3 a1 a2 a3"
	if got != want {
		t.Fatalf("order\n got %s\nwant %s", got, want)
	}
}

// TestLanePerAccountCap checks that an account never holds more than its
// share of slots, so an account that arrives later finds a free one at once,
// and that a lane's slots are all used when only one account has work.
func TestLanePerAccountCap(t *testing.T) {
	running := map[string]int{}
	l := newLane(8, 6, 8, func(tk task) { running[tk.run.b.AccountID]++ })
	hog := &batchRun{b: evs.Batch{AccountID: "hog", ID: "h"}}
	l.add(hog)
	for range 100 {
		l.push(task{run: hog})
	}
	if running["hog"] != 6 {
		t.Fatalf("hog holds %d slots, want its cap 6", running["hog"])
	}
	late := &batchRun{b: evs.Batch{AccountID: "late", ID: "l"}}
	l.add(late)
	for range 5 {
		l.push(task{run: late})
	}
	if running["late"] != 2 {
		t.Fatalf("late account got %d slots, want the 2 left free", running["late"])
	}
	if l.busy != 8 {
		t.Fatalf("busy %d, want 8", l.busy)
	}
}

// TestRetryDelay checks the fault back-off: it grows, stays under its cap
// and is jittered.
func TestRetryDelay(t *testing.T) {
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
