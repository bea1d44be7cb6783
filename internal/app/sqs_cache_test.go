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

// TestWorkerCacheLookupsWithGreylisting: the worker on AWS looks each
// address of a batch up in the account result cache once, its greylist
// retry included. A full-mode batch of live addresses on a loopback MTA,
// whose first RCPT for each user0 is greylisted, makes one miss per
// address and asks each greylisted address twice; the same addresses
// again make one hit each. What a reuse gives (no SMTP connection, the
// first verdict's checkedAt and reason, marked cached) and that maxAge 0
// probes again is the behaviour suite's, on both deployments
// (TestSuiteCacheReuse).
func TestWorkerCacheLookupsWithGreylisting(t *testing.T) {
	t.Parallel()
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

	firstConns, looked, _ := run(0)
	if firstConns == 0 || len(greyed) != domains {
		t.Fatalf("first batch: %d connections, %d greylisted: the test cannot tell", firstConns, len(greyed))
	}
	if looked[cache.Miss] != n || looked[cache.Hit]+looked[cache.Stale] != 0 {
		t.Errorf("first batch: lookups %v, want %d misses (one per address, retries included)", looked, n)
	}

	conns, looked, _ := run(time.Hour)
	if conns != 0 {
		t.Errorf("second batch: %d SMTP connections, want 0", conns)
	}
	if looked[cache.Hit] != n || len(looked) != 1 {
		t.Errorf("second batch: lookups %v, want %d hits", looked, n)
	}
	asked := map[string]int{}
	for _, c := range h.peer.Commands() {
		if a, ok := strings.CutPrefix(c, "RCPT TO:<"); ok && strings.HasPrefix(a, "user") {
			asked[strings.TrimSuffix(a, ">")]++
		}
	}
	for _, e := range h.emails {
		// Once (the first batch), and once more when greylisted.
		want := 1
		if greyed[e] {
			want = 2
		}
		if asked[e] != want {
			t.Errorf("%s asked %d times, want %d", e, asked[e], want)
		}
	}
	t.Logf("%d addresses: %d connections for the first batch, 0 for the second", n, firstConns)
}
