package store_test

import (
	"bytes"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/idempotency"
)

// idemRec returns an in-progress record of scope as the API layer makes one:
// locked for a minute, forgotten after 24 hours.
func idemRec(scope, fingerprint string, now time.Time) idempotency.Record {
	return idempotency.Record{
		Scope:       scope,
		Fingerprint: fingerprint,
		State:       idempotency.InProgress,
		LockedUntil: now.Add(time.Minute),
		ExpiresAt:   now.Add(24 * time.Hour),
	}
}

func runIdempotency(t *testing.T, newStore storeFactory) {
	const scope = "acct-1 POST /v1/requests key-1"

	t.Run("ClaimOnEmpty", func(t *testing.T) {
		e := newEnv(t, newStore)
		_, claimed, err := e.st.ClaimIdempotency(e.ctx, idemRec(scope, "fp-1", base), base)
		must(t, err, "ClaimIdempotency")
		if !claimed {
			t.Fatal("ClaimIdempotency on an empty store: claimed = false")
		}
	})

	t.Run("SecondClaimSeesTheFirst", func(t *testing.T) {
		e := newEnv(t, newStore)
		first := idemRec(scope, "fp-1", base)
		_, claimed, err := e.st.ClaimIdempotency(e.ctx, first, base)
		must(t, err, "first ClaimIdempotency")
		if !claimed {
			t.Fatal("first claim not claimed")
		}
		for _, fp := range []string{"fp-1", "fp-2"} {
			now := base.Add(10 * time.Second)
			got, claimed, err := e.st.ClaimIdempotency(e.ctx, idemRec(scope, fp, now), now)
			must(t, err, "second ClaimIdempotency")
			if claimed {
				t.Fatalf("second claim with fingerprint %s: claimed = true while the first is in progress", fp)
			}
			sameIdem(t, "existing record", got, first)
		}
	})

	t.Run("ScopesAreIndependent", func(t *testing.T) {
		e := newEnv(t, newStore)
		for i := range 3 {
			s := fmt.Sprintf("%s-%d", scope, i)
			_, claimed, err := e.st.ClaimIdempotency(e.ctx, idemRec(s, "fp", base), base)
			must(t, err, "ClaimIdempotency")
			if !claimed {
				t.Fatalf("claim of scope %q not claimed", s)
			}
		}
	})

	t.Run("CompleteStoresTheReply", func(t *testing.T) {
		e := newEnv(t, newStore)
		first := idemRec(scope, "fp-1", base)
		_, _, err := e.st.ClaimIdempotency(e.ctx, first, base)
		must(t, err, "ClaimIdempotency")
		headers := map[string]string{"Content-Type": "application/json", "Location": "/v1/requests/x"}
		body := []byte(`{"request":{"id":"x"},"replayed":false}`)
		must(t, e.st.CompleteIdempotency(e.ctx, scope, 201, headers, body), "CompleteIdempotency")

		// Later claims, also after the in-progress lock would have run out,
		// get the stored reply until the record expires.
		for _, now := range []time.Time{base.Add(time.Second), first.LockedUntil, first.LockedUntil.Add(time.Hour)} {
			got, claimed, err := e.st.ClaimIdempotency(e.ctx, idemRec(scope, "fp-2", now), now)
			must(t, err, "ClaimIdempotency after complete")
			if claimed {
				t.Fatalf("claim at %v of a done record: claimed = true", now)
			}
			want := first
			want.State, want.StatusCode, want.Headers, want.Body = idempotency.Done, 201, headers, body
			sameIdem(t, "done record", got, want)
		}
	})

	t.Run("CompleteWithEmptyReply", func(t *testing.T) {
		e := newEnv(t, newStore)
		first := idemRec(scope, "fp-1", base)
		_, _, err := e.st.ClaimIdempotency(e.ctx, first, base)
		must(t, err, "ClaimIdempotency")
		must(t, e.st.CompleteIdempotency(e.ctx, scope, 204, nil, nil), "CompleteIdempotency")
		got, claimed, err := e.st.ClaimIdempotency(e.ctx, idemRec(scope, "fp-1", base), base)
		must(t, err, "ClaimIdempotency after complete")
		if claimed {
			t.Fatal("claim of a done record: claimed = true")
		}
		want := first
		want.State, want.StatusCode = idempotency.Done, 204
		sameIdem(t, "done record", got, want)
	})

	t.Run("ExpiredRecordCanBeClaimed", func(t *testing.T) {
		for _, state := range []string{idempotency.InProgress, idempotency.Done} {
			t.Run(state, func(t *testing.T) {
				e := newEnv(t, newStore)
				first := idemRec(scope, "fp-1", base)
				first.LockedUntil = first.ExpiresAt // only expiry frees it
				_, _, err := e.st.ClaimIdempotency(e.ctx, first, base)
				must(t, err, "ClaimIdempotency")
				if state == idempotency.Done {
					must(t, e.st.CompleteIdempotency(e.ctx, scope, 200, map[string]string{"A": "b"}, []byte("x")), "CompleteIdempotency")
				}
				// One millisecond before expiry the record still holds.
				now := first.ExpiresAt.Add(-time.Millisecond)
				if _, claimed, err := e.st.ClaimIdempotency(e.ctx, idemRec(scope, "fp-2", now), now); err != nil || claimed {
					t.Fatalf("claim just before expiry: claimed=%v err=%v, want the existing record", claimed, err)
				}
				// At ExpiresAt it is forgotten.
				now = first.ExpiresAt
				second := idemRec(scope, "fp-2", now)
				_, claimed, err := e.st.ClaimIdempotency(e.ctx, second, now)
				must(t, err, "ClaimIdempotency at expiry")
				if !claimed {
					t.Fatal("claim at ExpiresAt: claimed = false")
				}
				got, claimed, err := e.st.ClaimIdempotency(e.ctx, idemRec(scope, "fp-3", now), now)
				must(t, err, "ClaimIdempotency after reclaim")
				if claimed {
					t.Fatal("claim after the reclaim: claimed = true")
				}
				sameIdem(t, "reclaimed record", got, second)
			})
		}
	})

	t.Run("StaleClaimCanBeClaimed", func(t *testing.T) {
		e := newEnv(t, newStore)
		first := idemRec(scope, "fp-1", base)
		_, _, err := e.st.ClaimIdempotency(e.ctx, first, base)
		must(t, err, "ClaimIdempotency")
		now := first.LockedUntil.Add(-time.Millisecond)
		if got, claimed, err := e.st.ClaimIdempotency(e.ctx, idemRec(scope, "fp-1", now), now); err != nil || claimed {
			t.Fatalf("claim just before LockedUntil: claimed=%v err=%v, want the existing record", claimed, err)
		} else {
			sameIdem(t, "locked record", got, first)
		}
		now = first.LockedUntil
		second := idemRec(scope, "fp-1", now)
		_, claimed, err := e.st.ClaimIdempotency(e.ctx, second, now)
		must(t, err, "ClaimIdempotency at LockedUntil")
		if !claimed {
			t.Fatal("claim of a stale in-progress record: claimed = false")
		}
		got, _, err := e.st.ClaimIdempotency(e.ctx, idemRec(scope, "fp-1", now), now)
		must(t, err, "ClaimIdempotency after reclaim")
		sameIdem(t, "reclaimed record", got, second)
	})

	t.Run("ReleaseDeletes", func(t *testing.T) {
		e := newEnv(t, newStore)
		_, _, err := e.st.ClaimIdempotency(e.ctx, idemRec(scope, "fp-1", base), base)
		must(t, err, "ClaimIdempotency")
		must(t, e.st.ReleaseIdempotency(e.ctx, scope), "ReleaseIdempotency")
		second := idemRec(scope, "fp-2", base)
		_, claimed, err := e.st.ClaimIdempotency(e.ctx, second, base)
		must(t, err, "ClaimIdempotency after release")
		if !claimed {
			t.Fatal("claim after release: claimed = false")
		}
		got, _, err := e.st.ClaimIdempotency(e.ctx, idemRec(scope, "fp-3", base), base)
		must(t, err, "ClaimIdempotency")
		sameIdem(t, "record after release and reclaim", got, second)
	})

	t.Run("ConcurrentClaimsOneWins", func(t *testing.T) {
		e := newEnv(t, newStore)
		const n = 20
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			claimed = make([]bool, n)
			seen    = make([]idempotency.Record, n)
			errs    = make([]error, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				seen[i], claimed[i], errs[i] = e.st.ClaimIdempotency(e.ctx, idemRec(scope, fmt.Sprintf("fp-%d", i), base), base)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := range n {
			must(t, errs[i], fmt.Sprintf("claim %d", i))
			if claimed[i] {
				if winner >= 0 {
					t.Fatalf("claims %d and %d both claimed the same scope", winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatal("no claim claimed the scope")
		}
		for i := range n {
			if i != winner && seen[i].Fingerprint != fmt.Sprintf("fp-%d", winner) {
				t.Errorf("claim %d saw fingerprint %q, want the winner's fp-%d", i, seen[i].Fingerprint, winner)
			}
		}
	})
}

func sameIdem(t *testing.T, what string, got, want idempotency.Record) {
	t.Helper()
	if got.Scope != want.Scope || got.Fingerprint != want.Fingerprint || got.State != want.State || got.StatusCode != want.StatusCode {
		t.Errorf("%s = {Scope:%q Fingerprint:%q State:%q StatusCode:%d}, want {Scope:%q Fingerprint:%q State:%q StatusCode:%d}",
			what, got.Scope, got.Fingerprint, got.State, got.StatusCode, want.Scope, want.Fingerprint, want.State, want.StatusCode)
	}
	sameTime(t, what+".LockedUntil", got.LockedUntil, want.LockedUntil)
	sameTime(t, what+".ExpiresAt", got.ExpiresAt, want.ExpiresAt)
	// An empty header map and a nil one are the same reply.
	if len(got.Headers) != len(want.Headers) || (len(want.Headers) > 0 && !maps.Equal(got.Headers, want.Headers)) {
		t.Errorf("%s.Headers = %v, want %v", what, got.Headers, want.Headers)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("%s.Body = %q, want %q", what, got.Body, want.Body)
	}
}
