package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

var base = time.Date(2026, 11, 22, 10, 4, 5, 0, time.UTC)

const scope = "acct\x00POST /v1/verify\x00key-1"

func open(t *testing.T, dir string) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), dir, func() time.Time { return base })
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openServingAtBase is openServing with the clock stopped at base.
func openServingAtBase(t *testing.T, dir string) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.OpenServing(context.Background(), dir, func() time.Time { return base })
	if err != nil {
		t.Fatalf("OpenServing: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// kinds are the two ways a store is opened: by any process (Open) and by
// the serving one (OpenServing, which also caches batch views); both keep
// local-mode records in the same table.
var kinds = []struct {
	name string
	open func(t *testing.T, dir string) *sqlitestore.Store
}{{"open", open}, {"serving", openServingAtBase}}

// eachKind runs f once per kind of store.
func eachKind(t *testing.T, f func(t *testing.T, open func(t *testing.T, dir string) *sqlitestore.Store)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { f(t, k.open) })
	}
}

// done is a finished record of scope, created at created.
func done(fp string, created time.Time, status int, body string) idempotency.Record {
	return idempotency.Record{
		Scope: scope, Fingerprint: fp, State: idempotency.Done,
		LockedUntil: created, ExpiresAt: created.Add(idempotency.Retention),
		StatusCode: status, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(body),
	}
}

// TestLookupPutIdempotency: what the local mode's two calls see and do for
// each record a scope can have at the moment they run, including the
// in-progress records a shared Keeper leaves in an old data directory.
func TestLookupPutIdempotency(t *testing.T) {
	eachKind(t, testLookupPut)
}

func testLookupPut(t *testing.T, open func(t *testing.T, dir string) *sqlitestore.Store) {
	ctx := context.Background()
	// claim writes the in-progress record of a shared Keeper (or of an
	// older evs serve) that crashed mid-call at base.
	claim := func(t *testing.T, s *sqlitestore.Store) idempotency.Record {
		rec := idempotency.Record{Scope: scope, Fingerprint: "fp-old", State: idempotency.InProgress,
			LockedUntil: base.Add(idempotency.LockTimeout), ExpiresAt: base.Add(idempotency.Retention)}
		if _, claimed, err := s.ClaimIdempotency(ctx, rec, base); err != nil || !claimed {
			t.Fatalf("ClaimIdempotency: claimed=%v err=%v", claimed, err)
		}
		return rec
	}
	put := func(t *testing.T, s *sqlitestore.Store) idempotency.Record {
		rec := done("fp-old", base, 201, `{"old":true}`)
		if err := s.PutIdempotency(ctx, rec, base); err != nil {
			t.Fatalf("PutIdempotency: %v", err)
		}
		return rec
	}
	tests := []struct {
		name  string
		setup func(*testing.T, *sqlitestore.Store) idempotency.Record // nil: no record
		at    time.Time
		live  bool // Lookup finds the record and Put refuses to replace it
	}{
		{"no record", nil, base, false},
		{"done", put, base, true},
		{"done, 1 ms before expiry", put, base.Add(idempotency.Retention - time.Millisecond), true},
		{"done, expired", put, base.Add(idempotency.Retention), false},
		{"legacy in progress", claim, base, true},
		{"legacy in progress, 1 ms before LockedUntil", claim, base.Add(idempotency.LockTimeout - time.Millisecond), true},
		{"legacy in progress, stale", claim, base.Add(idempotency.LockTimeout), false},
		{"legacy in progress, expired", claim, base.Add(idempotency.Retention), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t, t.TempDir())
			var old idempotency.Record
			if tt.setup != nil {
				old = tt.setup(t, s)
			}
			got, found, err := s.LookupIdempotency(ctx, scope, tt.at)
			if err != nil || found != tt.live {
				t.Fatalf("LookupIdempotency: found=%v err=%v, want found=%v", found, err, tt.live)
			}
			if found && !reflect.DeepEqual(got, old) {
				t.Fatalf("LookupIdempotency = %+v, want %+v", got, old)
			}
			if !found && !reflect.DeepEqual(got, idempotency.Record{}) {
				t.Fatalf("LookupIdempotency found nothing but returned %+v", got)
			}

			rec := done("fp-new", tt.at, 200, `{"new":true}`)
			err = s.PutIdempotency(ctx, rec, tt.at)
			want := rec
			if tt.live {
				if !errors.Is(err, sqlitestore.ErrLiveRecord) {
					t.Fatalf("PutIdempotency over a live record: %v, want ErrLiveRecord", err)
				}
				want = old
			} else if err != nil {
				t.Fatalf("PutIdempotency: %v", err)
			}
			// Whichever record stands now is what Lookup, and a shared
			// Keeper's claim, find.
			got, found, err = s.LookupIdempotency(ctx, scope, tt.at)
			if err != nil || !found || !reflect.DeepEqual(got, want) {
				t.Fatalf("after PutIdempotency: %+v found=%v err=%v, want %+v", got, found, err, want)
			}
			existing, claimed, err := s.ClaimIdempotency(ctx, idempotency.Record{Scope: scope, Fingerprint: "fp-3", State: idempotency.InProgress,
				LockedUntil: tt.at.Add(time.Minute), ExpiresAt: tt.at.Add(time.Hour)}, tt.at)
			if err != nil || claimed || !reflect.DeepEqual(existing, want) {
				t.Fatalf("ClaimIdempotency after PutIdempotency: claimed=%v %+v err=%v, want the record %+v", claimed, existing, err, want)
			}
		})
	}
}

func TestPutIdempotencyRecord(t *testing.T) {
	eachKind(t, testPutRecord)
}

func testPutRecord(t *testing.T, open func(t *testing.T, dir string) *sqlitestore.Store) {
	ctx := context.Background()
	t.Run("reply without headers or body", func(t *testing.T) {
		s := open(t, t.TempDir())
		rec := idempotency.Record{Scope: scope, Fingerprint: "fp", State: idempotency.Done, LockedUntil: base,
			ExpiresAt: base.Add(time.Hour), StatusCode: 204}
		if err := s.PutIdempotency(ctx, rec, base); err != nil {
			t.Fatal(err)
		}
		got, found, err := s.LookupIdempotency(ctx, scope, base)
		if err != nil || !found || got.StatusCode != 204 || got.Headers != nil || len(got.Body) != 0 {
			t.Fatalf("LookupIdempotency = %+v found=%v err=%v", got, found, err)
		}
	})
	t.Run("in progress is refused", func(t *testing.T) {
		s := open(t, t.TempDir())
		rec := idempotency.Record{Scope: scope, Fingerprint: "fp", State: idempotency.InProgress,
			LockedUntil: base.Add(time.Minute), ExpiresAt: base.Add(time.Hour)}
		if err := s.PutIdempotency(ctx, rec, base); err == nil {
			t.Fatal("PutIdempotency stored an in-progress record")
		}
		if _, found, err := s.LookupIdempotency(ctx, scope, base); err != nil || found {
			t.Fatalf("after a refused put: found=%v err=%v", found, err)
		}
	})
	t.Run("durable across reopen", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		rec := done("fp", base, 200, `{"a":1}`)
		if err := s.PutIdempotency(ctx, rec, base); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		got, found, err := open(t, dir).LookupIdempotency(ctx, scope, base)
		if err != nil || !found || !reflect.DeepEqual(got, rec) {
			t.Fatalf("after reopen: %+v found=%v err=%v, want %+v", got, found, err, rec)
		}
	})
	t.Run("closed store", func(t *testing.T) {
		s := open(t, t.TempDir())
		s.Close()
		if err := s.PutIdempotency(ctx, done("fp", base, 200, "x"), base); err == nil {
			t.Fatal("PutIdempotency on a closed store: no error")
		}
		if _, _, err := s.LookupIdempotency(ctx, scope, base); err == nil {
			t.Fatal("LookupIdempotency on a closed store: no error")
		}
	})
}

// TestServingReadsTableRecords: records written by another kind of process
// (a shared-mode Keeper, or an earlier evs serve) are what a serving store
// replays: live ones found, stale claims and expired records not.
func TestServingReadsTableRecords(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	inProgress := idempotency.Record{Scope: "claimed", Fingerprint: "fp", State: idempotency.InProgress,
		LockedUntil: base.Add(idempotency.LockTimeout), ExpiresAt: base.Add(idempotency.Retention)}
	stale := idempotency.Record{Scope: "stale", Fingerprint: "fp", State: idempotency.InProgress,
		LockedUntil: base.Add(-time.Second), ExpiresAt: base.Add(time.Hour)}
	finished := done("fp", base, 200, `{"a":1}`)
	expired := done("fp", base.Add(-idempotency.Retention), 200, "old")
	expired.Scope = "expired"
	s := open(t, dir)
	for _, rec := range []idempotency.Record{finished, expired} {
		if err := s.PutIdempotency(ctx, rec, rec.LockedUntil.Add(-time.Hour)); err != nil {
			t.Fatalf("PutIdempotency %s: %v", rec.Scope, err)
		}
	}
	for _, rec := range []idempotency.Record{inProgress, stale} {
		if _, claimed, err := s.ClaimIdempotency(ctx, rec, base.Add(-time.Hour)); err != nil || !claimed {
			t.Fatalf("ClaimIdempotency %s: %v %v", rec.Scope, claimed, err)
		}
	}
	s.Close()
	served := openServingAtBase(t, dir)
	for _, tt := range []struct {
		rec  idempotency.Record
		live bool
	}{{inProgress, true}, {finished, true}, {stale, false}, {expired, false}} {
		got, found, err := served.LookupIdempotency(ctx, tt.rec.Scope, base)
		if err != nil || found != tt.live || tt.live && !reflect.DeepEqual(got, tt.rec) {
			t.Fatalf("served %s: %+v found=%v err=%v, want live=%v %+v", tt.rec.Scope, got, found, err, tt.live, tt.rec)
		}
	}
}

// TestSweepKeepsLiveKeys: a serving store answers most lookups of new keys
// without reading (its key filter, rebuilt by Sweep); records put before,
// during and after a sweep are all found, and swept ones are not.
func TestSweepKeepsLiveKeys(t *testing.T) {
	ctx := context.Background()
	s := openServingAtBase(t, t.TempDir())
	put := func(name string, expires time.Time) {
		rec := done("fp", base.Add(-time.Hour), 200, name)
		rec.Scope, rec.ExpiresAt = name, expires
		if err := s.PutIdempotency(ctx, rec, rec.LockedUntil); err != nil {
			t.Errorf("PutIdempotency %s: %v", name, err)
		}
	}
	for i := range 500 {
		put(fmt.Sprint("old-", i), base.Add(-time.Minute))
		put(fmt.Sprint("live-", i), base.Add(time.Hour))
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 500 {
			put(fmt.Sprint("during-", i), base.Add(time.Hour))
		}
	})
	if n, err := s.Sweep(ctx); err != nil || n != 500 {
		t.Fatalf("Sweep: %d, %v; want 500 records deleted", n, err)
	}
	wg.Wait()
	for i := range 500 {
		for _, name := range []string{fmt.Sprint("live-", i), fmt.Sprint("during-", i)} {
			if rec, found, err := s.LookupIdempotency(ctx, name, base); err != nil || !found || string(rec.Body) != name {
				t.Fatalf("LookupIdempotency %s after the sweep: found=%v err=%v", name, found, err)
			}
		}
		if _, found, err := s.LookupIdempotency(ctx, fmt.Sprint("old-", i), base); err != nil || found {
			t.Fatalf("swept record old-%d: found=%v err=%v", i, found, err)
		}
	}
}
