package dynamostore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/politeness"
)

// TestRcptBudget: reservations add up to the limit of a window and no
// further, the last one taking what is left when that is at least its
// least; the next window starts afresh; keys are separate.
func TestRcptBudget(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t, time.Now), context.Background()
	const window = time.Minute
	t0 := time.Date(2030, 1, 1, 10, 0, 5, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	for i, tc := range []struct {
		key               string
		least, most, want int
		at                time.Time
	}{
		{"google|direct", 2, 6, 6, t0},
		{"google|direct", 2, 4, 4, t0.Add(10 * time.Second)}, // 10 of 10
		{"google|direct", 1, 1, 0, t0.Add(20 * time.Second)},
		{"google|10.0.0.1", 2, 10, 10, t0}, // another egress address
		{"google|direct", 2, 7, 7, t1},     // the next window
		{"google|direct", 2, 7, 3, t1},     // what is left
		{"google|direct", 2, 5, 0, t1},     // none
	} {
		got, next, err := st.ReserveRcpts(ctx, tc.key, tc.least, tc.most, 10, window, tc.at)
		if err != nil || got != tc.want || !next.Equal(tc.at.Truncate(window).Add(window)) {
			t.Fatalf("%d: ReserveRcpts(%s, %d..%d) = %d, next %s, %v; want %d", i, tc.key, tc.least, tc.most, got, next, err, tc.want)
		}
	}
	// Racing reservations never pass the limit together.
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := map[string]int{}
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, least := "race|direct", 3 // all or nothing
			if i%2 == 1 {
				key, least = "race|partial", 1
			}
			got, _, err := st.ReserveRcpts(ctx, key, least, 3, 10, window, t0)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			granted[key] += got
			mu.Unlock()
		}()
	}
	wg.Wait()
	if granted["race|direct"] != 9 || granted["race|partial"] > 10 || granted["race|partial"] < 9 {
		t.Fatalf("granted under a limit of 10: %v; want 9 of 3s, and 9 or 10 when a remainder is taken", granted)
	}
}

// TestPauseBackoff: pauses double while they follow each other, a pause
// in force is not extended, and a clean session ends the run.
func TestPauseBackoff(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t, time.Now), context.Background()
	const key, base, most = "microsoft365|direct", time.Minute, 4 * time.Minute
	now := time.Now().Truncate(time.Millisecond)
	if until, level, err := st.PauseState(ctx, key); err != nil || !until.IsZero() || level != 0 {
		t.Fatalf("before any pause: %s %d %v", until, level, err)
	}
	length := func(level int) time.Duration { return politeness.Double(base, most, level) }
	want := []time.Duration{base, 2 * base, 4 * base, most}
	for i, d := range want {
		until, err := st.Pause(ctx, key, now, length)
		if err != nil || !until.Equal(now.Add(d)) {
			t.Fatalf("pause %d: until %s, want %s (%v)", i+1, until.Sub(now), d, err)
		}
		// A second throttled session during the pause changes nothing.
		if again, err := st.Pause(ctx, key, now.Add(time.Second), length); err != nil || !again.Equal(until) {
			t.Fatalf("pause %d again: %s, want %s (%v)", i+1, again.Sub(now), d, err)
		}
		// A clean session during the pause does not end it.
		if err := st.ClearPause(ctx, key, now.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		now = until.Add(time.Second)
	}
	if err := st.ClearPause(ctx, key, now); err != nil {
		t.Fatal(err)
	}
	if until, err := st.Pause(ctx, key, now, length); err != nil || !until.Equal(now.Add(base)) {
		t.Fatalf("after a clean session: %s, want %s (%v)", until.Sub(now), base, err)
	}
}

// TestParking: parked work comes out oldest first, only when due, each
// entry to one taker; an entry taken but not removed comes back after the
// claim; wakes are claimed once per due time.
func TestParking(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t, time.Now), context.Background()
	const key = "example.com|direct"
	now := time.Now().Truncate(time.Millisecond)
	for i, nb := range []time.Duration{2 * time.Second, 0, time.Minute} {
		if err := st.Park(ctx, key, now.Add(nb), fmt.Sprintf("body%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if next, ok, err := st.NextParked(ctx, key); err != nil || !ok || !next.Equal(now) {
		t.Fatalf("NextParked: %s %v %v", next, ok, err)
	}
	if keys, err := st.ParkedKeys(ctx); err != nil || len(keys) != 1 || keys[0] != key {
		t.Fatalf("ParkedKeys: %v %v", keys, err)
	}
	at := now.Add(3 * time.Second)
	var bodies []string
	for {
		b, remove, ok, err := st.TakeParked(ctx, key, at)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		bodies = append(bodies, b)
		if b == "body1" {
			remove()
		}
	}
	if fmt.Sprint(bodies) != "[body1 body0]" {
		t.Fatalf("taken %v, want [body1 body0] (oldest due first, once each)", bodies)
	}
	// body0 was claimed and not removed: back after the claim.
	if b, remove, ok, err := st.TakeParked(ctx, key, at.Add(6*time.Minute)); err != nil || !ok || b != "body0" {
		t.Fatalf("after the claim: %q %v %v", b, ok, err)
	} else {
		remove()
	}
	// Racing takers: one gets the entry.
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, ok, err := st.TakeParked(ctx, key, now.Add(2*time.Minute))
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				got++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got != 1 {
		t.Fatalf("%d racing takers got the last entry, want 1", got)
	}

	wake := now.Add(10 * time.Second)
	for i, tc := range []struct {
		at, now time.Time
		want    bool
	}{
		{wake, now, true},
		{wake, now, false},                                   // pending at the same time
		{wake.Add(time.Second), now, false},                  // a sooner one is pending
		{wake.Add(-time.Second), now, true},                  // sooner than the pending one
		{wake.Add(time.Minute), wake.Add(time.Second), true}, // the pending one is past
	} {
		if ok, err := st.ClaimWake(ctx, key, tc.at, tc.now); err != nil || ok != tc.want {
			t.Fatalf("wake %d: %v %v, want %v", i, ok, err, tc.want)
		}
	}
}

// TestGateSharedThroughDynamoDB: politeness.Gate over the store keeps its
// rules across instances: two gates on one table (two Lambda instances,
// the worker's and /v1/verify's) share the provider's session slots, a
// pause one stores defers the other's synchronous session, and a clean
// session after the pause ends the run of pauses.
func TestGateSharedThroughDynamoDB(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t, time.Now), context.Background()
	now := time.Now().Truncate(time.Millisecond)
	clock := func() time.Time { return now }
	limits := politeness.Limits{Sessions: map[string]int{"*": 1}}
	worker := &politeness.Gate{State: st, Limits: limits, Now: clock}
	api := &politeness.Gate{State: st, Limits: limits, Now: clock}
	// wait bounds the state's reads too: long enough for the first read on
	// a loaded moto (300 ms was not); the first deferral waits it out.
	const host, wait = "mx1.example.net", 2 * time.Second
	key := worker.HostKey(host)
	batch, err := worker.Admit(ctx, key, 2)
	if err != nil || !batch.OK {
		t.Fatalf("the worker's session: %+v %v", batch, err)
	}
	for i, want := range []string{
		"every SMTP session we allow to example.net at once is in use",
		"example.net asked us to slow down and is paused for every check; retry in 60 s",
	} {
		if end, why := api.Session(ctx, host, wait); end != nil || !strings.Contains(why, want) {
			t.Fatalf("%d: the API's session admitted (%v) or deferred for %q, want %q", i, end != nil, why, want)
		}
		if i == 0 {
			if until, err := batch.Done(ctx, true); err != nil || !until.Equal(now.Add(time.Minute)) {
				t.Fatalf("throttled: paused until %v, %v", until, err)
			}
		}
	}
	now = now.Add(time.Minute)
	end, why := api.Session(ctx, host, wait)
	if end == nil {
		t.Fatalf("after the pause: deferred: %s", why)
	}
	end(false)
	if until, level, err := st.PauseState(ctx, key); err != nil || level != 0 || !until.IsZero() {
		t.Fatalf("after a clean session: paused until %v, level %d, %v", until, level, err)
	}
}
