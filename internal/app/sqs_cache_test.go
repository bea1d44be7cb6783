package app_test

import (
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// TestWorkerReusesCachedVerdicts: the worker on AWS uses the account result
// cache as `evs serve`'s runner does. A full-mode batch of live addresses
// on a loopback MTA, whose first RCPT for each user0 is greylisted, probes
// every address and looks each one up once (its greylist retry reads no
// more). The same addresses again, in a batch with maxAge 1 h, open no SMTP
// connection and come back cached, with the first batch's checkedAt; with
// maxAge 0 they are all probed again.
func TestWorkerReusesCachedVerdicts(t *testing.T) {
	const domains, users = 4, 5
	w := newWorld(t, 200, time.Second, 3)
	var (
		mu      sync.Mutex
		greyed  = map[string]bool{}
		lookups = map[string]int{}
	)
	h := newSharedHostRcpt(t, w, 0, domains, users, func(a string) string {
		if !strings.HasPrefix(a, "user") {
			return "550 5.1.1 no such user" // the accept-all probe
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(a, "user0@") && !greyed[a] {
			greyed[a] = true
			return "450 4.2.0 Greylisted, try again later"
		}
		return "250 2.1.5 OK"
	})
	n := len(h.emails)
	w.w.Processor = &batch.Processor{Engine: h.engine(t, 0), Sandbox: verify.NewSandbox(nil), MaxGreyAttempts: 3}
	w.w.Cache = &cache.Cache{Store: w.st, TTL: 24 * time.Hour, Now: time.Now, Count: func(r string) {
		mu.Lock()
		lookups[r]++
		mu.Unlock()
	}}
	// run verifies the addresses in a batch of maxAge and returns the
	// connections the MTA accepted meanwhile, the lookups made and the
	// stored decisions by address.
	run := func(maxAge time.Duration) (conns int, looked map[string]int, got map[string]evs.Decision) {
		t.Helper()
		before := h.peer.Connections()
		mu.Lock()
		clear(lookups)
		mu.Unlock()
		w.maxAge = maxAge
		b := w.createBatch(evs.ModeFull, h.emails...)
		if err := w.q.Enqueue(w.ctx, b); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); !w.current().State.Final(); {
			if time.Now().After(deadline) {
				t.Fatalf("the batch did not finish: %+v\n%s", w.current(), w.logs.String())
			}
			if ms := w.receive(10, 1); len(ms) > 0 {
				w.handle(ms...)
			}
		}
		if cur := w.current(); cur.State != evs.StateCompleted || cur.Counters.Deliverable != n {
			t.Fatalf("batch %s %+v, want %d deliverable", cur.State, cur.Counters, n)
		}
		rs, err := w.st.Results(w.ctx, b.AccountID, b.ID, -1, 1000, "")
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]evs.Decision{}
		for _, r := range rs {
			got[r.Email] = r.Decision
		}
		mu.Lock()
		defer mu.Unlock()
		return h.peer.Connections() - before, maps.Clone(lookups), got
	}

	firstConns, looked, first := run(0)
	if firstConns == 0 || len(greyed) != domains {
		t.Fatalf("first batch: %d connections, %d greylisted: the test cannot tell", firstConns, len(greyed))
	}
	if looked[cache.Miss] != n || looked[cache.Hit]+looked[cache.Stale] != 0 {
		t.Errorf("first batch: lookups %v, want %d misses (one per address, retries included)", looked, n)
	}
	for e, d := range first {
		if d.Cached {
			t.Errorf("first batch: %s cached", e)
		}
	}

	conns, looked, again := run(time.Hour)
	if conns != 0 {
		t.Errorf("second batch: %d SMTP connections, want 0", conns)
	}
	if looked[cache.Hit] != n || len(looked) != 1 {
		t.Errorf("second batch: lookups %v, want %d hits", looked, n)
	}
	for e, d := range again {
		if f := first[e]; !d.Cached || !d.CheckedAt.Equal(f.CheckedAt.Time) || d.Reason != f.Reason {
			t.Errorf("second batch: %s cached=%v checkedAt %v reason %s, want cached, %v, %s", e, d.Cached, d.CheckedAt, d.Reason, f.CheckedAt, f.Reason)
		}
	}

	conns, _, fresh := run(evs.NoReuse)
	if conns == 0 {
		t.Error("maxAge 0: no SMTP connection, want every address probed again")
	}
	for e, d := range fresh {
		if d.Cached {
			t.Errorf("maxAge 0: %s cached", e)
		}
	}
	asked := map[string]int{}
	for _, c := range h.peer.Commands() {
		if a, ok := strings.CutPrefix(c, "RCPT TO:<"); ok && strings.HasPrefix(a, "user") {
			asked[strings.TrimSuffix(a, ">")]++
		}
	}
	for _, e := range h.emails {
		// Twice (batches one and three), and once more when greylisted.
		want := 2
		if greyed[e] {
			want = 3
		}
		if asked[e] != want {
			t.Errorf("%s asked %d times, want %d", e, asked[e], want)
		}
	}
	t.Logf("%d addresses: %d connections for the first batch, 0 for the second, %d with maxAge 0", n, firstConns, conns)
}
