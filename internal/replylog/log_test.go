package replylog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/replylog"
)

var base = time.Date(2026, 11, 23, 10, 4, 5, 0, time.UTC)

func open(t *testing.T, dir string, o replylog.Options) *replylog.Log {
	t.Helper()
	l, err := replylog.Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// done is a finished record of scope, created at created.
func done(scope string, created time.Time, body string) idempotency.Record {
	return idempotency.Record{
		Scope: scope, Fingerprint: "fp-" + scope, State: idempotency.Done,
		LockedUntil: created, ExpiresAt: created.Add(idempotency.Retention),
		StatusCode: 200, Headers: map[string]string{"Content-Type": "application/json", "X-Evs": "1"}, Body: []byte(body),
	}
}

func put(t *testing.T, l *replylog.Log, rec idempotency.Record, now time.Time) {
	t.Helper()
	if err := l.Put(context.Background(), rec, now); err != nil {
		t.Fatalf("Put %q: %v", rec.Scope, err)
	}
}

// want checks that scope's live record at now is rec (or that there is
// none, for a zero rec).
func want(t *testing.T, l *replylog.Log, scope string, now time.Time, rec idempotency.Record) {
	t.Helper()
	got, found, err := l.Lookup(context.Background(), scope, now)
	if err != nil {
		t.Fatalf("Lookup %q: %v", scope, err)
	}
	if rec.Scope == "" {
		if found {
			t.Fatalf("Lookup %q found %+v, want nothing", scope, got)
		}
		return
	}
	if !found || !reflect.DeepEqual(got, rec) {
		t.Fatalf("Lookup %q = %+v (found %v), want %+v", scope, got, found, rec)
	}
}

// TestLiveness: what Lookup finds and Put refuses, for each record a scope
// can have at the moment they run.
func TestLiveness(t *testing.T) {
	inProgress := idempotency.Record{Scope: "s", Fingerprint: "fp-old", State: idempotency.InProgress,
		LockedUntil: base.Add(idempotency.LockTimeout), ExpiresAt: base.Add(idempotency.Retention)}
	finished := done("s", base, `{"old":true}`)
	tests := []struct {
		name string
		old  idempotency.Record // zero: no record
		at   time.Time
		live bool
	}{
		{"no record", idempotency.Record{}, base, false},
		{"done", finished, base, true},
		{"done, 1 ms before expiry", finished, base.Add(idempotency.Retention - time.Millisecond), true},
		{"done, expired", finished, base.Add(idempotency.Retention), false},
		{"in progress", inProgress, base, true},
		{"in progress, 1 ms before LockedUntil", inProgress, base.Add(idempotency.LockTimeout - time.Millisecond), true},
		{"in progress, stale", inProgress, base.Add(idempotency.LockTimeout), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := open(t, t.TempDir(), replylog.Options{})
			if tt.old.Scope != "" {
				put(t, l, tt.old, base)
			}
			if tt.live {
				want(t, l, "s", tt.at, tt.old)
			} else {
				want(t, l, "s", tt.at, idempotency.Record{})
			}
			rec := done("s", tt.at, `{"new":true}`)
			err := l.Put(context.Background(), rec, tt.at)
			if tt.live {
				if !errors.Is(err, replylog.ErrLive) {
					t.Fatalf("Put over a live record: %v, want ErrLive", err)
				}
				want(t, l, "s", tt.at, tt.old)
				return
			}
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			want(t, l, "s", tt.at, rec)
		})
	}
}

// TestRecordRoundTrip: every field of a record comes back as it was put,
// in the store's millisecond precision, also after a reopen.
func TestRecordRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, replylog.Options{})
	recs := []idempotency.Record{
		done("acct\x00POST /v1/verify\x00k-1", base, `{"email":"a@b.c"}`),
		{Scope: "no headers, empty body", Fingerprint: "f", State: idempotency.Done, LockedUntil: base,
			ExpiresAt: base.Add(idempotency.Retention), StatusCode: 422, Body: []byte{}},
		{Scope: "big", Fingerprint: "f", State: idempotency.Done, LockedUntil: base, ExpiresAt: base.Add(time.Hour),
			StatusCode: 201, Headers: map[string]string{"Location": "/v1/requests/x"}, Body: make([]byte, 100_000)},
	}
	for _, rec := range recs {
		put(t, l, rec, base)
	}
	for _, rec := range recs {
		want(t, l, rec.Scope, base, rec)
	}
	l.Close()
	l = open(t, dir, replylog.Options{})
	for _, rec := range recs {
		want(t, l, rec.Scope, base, rec)
	}
	sub := done("ms", base.Add(1234567*time.Nanosecond), "x")
	put(t, l, sub, base)
	got, _, _ := l.Lookup(context.Background(), "ms", base)
	if !got.ExpiresAt.Equal(sub.ExpiresAt.Truncate(time.Millisecond)) {
		t.Fatalf("ExpiresAt %v, want %v in milliseconds", got.ExpiresAt, sub.ExpiresAt)
	}
}

// TestConcurrentPuts: puts from many goroutines share syncs, and every one
// that returned is there, also after a reopen; of concurrent puts of one
// scope exactly one wins.
func TestConcurrentPuts(t *testing.T) {
	for _, kind := range syncKinds {
		t.Run(kind, func(t *testing.T) {
			replylog.ForceSync(t, kind)
			testConcurrentPuts(t, kind)
		})
	}
}

func testConcurrentPuts(t *testing.T, kind string) {
	dir := t.TempDir()
	l := open(t, dir, replylog.Options{SegmentBytes: 64 << 10})
	if got := l.Stats().Sync; got != kind {
		t.Skipf("syncs with %s here, not %s (TestSyncKinds says why)", got, kind)
	}
	const workers, each = 32, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				scope := fmt.Sprintf("w%d-%d", w, i)
				if err := l.Put(context.Background(), done(scope, base, scope), base); err != nil {
					errs <- err
				}
			}
		})
	}
	var wins sync.WaitGroup
	won := make(chan error, workers)
	for range workers {
		wins.Go(func() { won <- l.Put(context.Background(), done("contended", base, "x"), base) })
	}
	wg.Wait()
	wins.Wait()
	close(errs)
	close(won)
	for err := range errs {
		t.Fatalf("Put: %v", err)
	}
	var ok, live int
	for err := range won {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, replylog.ErrLive):
			live++
		default:
			t.Fatalf("contended Put: %v", err)
		}
	}
	if ok != 1 || live != workers-1 {
		t.Fatalf("contended puts: %d stored, %d refused; want 1 and %d", ok, live, workers-1)
	}
	check := func(l *replylog.Log) {
		for w := range workers {
			for i := range each {
				scope := fmt.Sprintf("w%d-%d", w, i)
				want(t, l, scope, base, done(scope, base, scope))
			}
		}
	}
	check(l)
	if s := l.Stats(); s.Segments < 2 {
		t.Fatalf("%d segments for %d KB of records in 64 KB segments", s.Segments, workers*each*150/1024)
	}
	l.Close()
	check(open(t, dir, replylog.Options{SegmentBytes: 64 << 10}))
}

// segments lists the segment files in dir.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

// TestTornTail: a crash mid-write leaves part of a record at the end of the
// segment. Reopening keeps every record before it, drops the torn one, and
// appends to a new segment, whose records survive the next reopen too.
func TestTornTail(t *testing.T) {
	for _, cut := range []struct {
		name string
		keep func(n int) int // bytes of the last record left on disk
	}{
		{"header cut", func(int) int { return 5 }},
		{"payload cut", func(n int) int { return n - 3 }},
		{"payload damaged", func(n int) int { return -1 }},
	} {
		t.Run(cut.name, func(t *testing.T) {
			dir := t.TempDir()
			l := open(t, dir, replylog.Options{})
			put(t, l, done("first", base, "1"), base)
			put(t, l, done("second", base, "2"), base)
			fi := size(t, segments(t, dir)[0])
			put(t, l, done("torn", base, "3"), base)
			end := size(t, segments(t, dir)[0])
			l.Close()
			seg := segments(t, dir)[0]
			n := recordLen(t, seg, fi)
			if k := cut.keep(n); k >= 0 {
				// What a crash leaves: the record's first k bytes, and
				// nothing (or zeros) after.
				if err := os.Truncate(seg, fi+int64(k)); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(seg, end); err != nil {
					t.Fatal(err)
				}
			} else {
				flip(t, seg, fi+int64(n)-1)
			}
			l = open(t, dir, replylog.Options{})
			want(t, l, "first", base, done("first", base, "1"))
			want(t, l, "second", base, done("second", base, "2"))
			want(t, l, "torn", base, idempotency.Record{})
			put(t, l, done("torn", base, "again"), base)
			put(t, l, done("after", base, "4"), base)
			l.Close()
			if got := len(segments(t, dir)); got != 2 {
				t.Fatalf("%d segments after a reopen, want 2", got)
			}
			l = open(t, dir, replylog.Options{})
			want(t, l, "second", base, done("second", base, "2"))
			want(t, l, "torn", base, done("torn", base, "again"))
			want(t, l, "after", base, done("after", base, "4"))
		})
	}
}

// size is the length of the file's records: where the zeros begin.
func size(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var off int64
	for off+8 <= int64(len(b)) {
		n := int64(b[off]) | int64(b[off+1])<<8 | int64(b[off+2])<<16 | int64(b[off+3])<<24
		if n == 0 {
			break
		}
		off += 8 + n
	}
	return off
}

// recordLen is the length, header included, of the record at off.
func recordLen(t *testing.T, path string, off int64) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return 8 + (int(b[off]) | int(b[off+1])<<8 | int(b[off+2])<<16 | int(b[off+3])<<24)
}

// flip inverts the byte of path at off.
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCollisions: with every scope hashed alike, each is still found, put
// over, refused while live, swept and recovered as its own.
func TestCollisions(t *testing.T) {
	replylog.ForceHash(t, func(string) uint64 { return 42 })
	dir := t.TempDir()
	l := open(t, dir, replylog.Options{})
	scopes := []string{"a", "b", "c", "d"}
	for _, s := range scopes {
		put(t, l, done(s, base, s), base)
	}
	for _, s := range scopes {
		want(t, l, s, base, done(s, base, s))
	}
	want(t, l, "e", base, idempotency.Record{})
	if err := l.Put(context.Background(), done("c", base, "again"), base); !errors.Is(err, replylog.ErrLive) {
		t.Fatalf("Put over a live colliding record: %v", err)
	}
	later := base.Add(idempotency.Retention)
	put(t, l, done("b", later, "b2"), later)
	put(t, l, done("a", later, "a2"), later)
	want(t, l, "a", later, done("a", later, "a2"))
	want(t, l, "b", later, done("b", later, "b2"))
	want(t, l, "c", later, idempotency.Record{})
	if s := l.Stats(); s.Indexed != 1 || s.Overflow != 3 {
		t.Fatalf("stats %+v, want 1 indexed and 3 in overflow", s)
	}
	l.Close()
	l = open(t, dir, replylog.Options{})
	want(t, l, "a", later, done("a", later, "a2"))
	want(t, l, "b", later, done("b", later, "b2"))
	want(t, l, "d", base, done("d", base, "d"))
}

// TestSweep: a segment goes, file and index entries, once every record in
// it has expired, and not before; the segment taking appends is sealed
// first when all its records have expired.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	o := replylog.Options{SegmentAge: time.Hour}
	l := open(t, dir, o)
	put(t, l, done("old-1", base, "1"), base)
	put(t, l, done("old-2", base, "2"), base)
	t1 := base.Add(2 * time.Hour) // seals the first segment
	put(t, l, done("new", t1, "3"), t1)
	if got := len(segments(t, dir)); got != 2 {
		t.Fatalf("%d segments, want 2", got)
	}
	if n, err := l.Sweep(base.Add(idempotency.Retention - time.Millisecond)); err != nil || n != 0 {
		t.Fatalf("Sweep before expiry: %d, %v", n, err)
	}
	want(t, l, "old-1", base, done("old-1", base, "1"))
	n, err := l.Sweep(base.Add(idempotency.Retention))
	if err != nil || n != 2 {
		t.Fatalf("Sweep at expiry of the first segment: %d, %v; want 2 records", n, err)
	}
	if got := len(segments(t, dir)); got != 1 {
		t.Fatalf("%d segments after the sweep, want 1", got)
	}
	if s := l.Stats(); s.Indexed != 1 {
		t.Fatalf("stats %+v after the sweep, want 1 indexed", s)
	}
	want(t, l, "old-1", base, idempotency.Record{}) // gone, even read as of before
	want(t, l, "new", t1, done("new", t1, "3"))

	n, err = l.Sweep(t1.Add(idempotency.Retention))
	if err != nil || n != 1 {
		t.Fatalf("Sweep at expiry of the active segment: %d, %v; want 1", n, err)
	}
	if got := len(segments(t, dir)); got != 1 {
		t.Fatalf("%d segments after sealing and sweeping the active one, want the new empty one", got)
	}
	t2 := t1.Add(idempotency.Retention)
	put(t, l, done("new", t2, "4"), t2)
	l.Close()
	want(t, open(t, dir, o), "new", t2, done("new", t2, "4"))
}

// TestBroken: once a write fails, the put that needed it fails, and so does
// every later put rather than write past what is on disk; lookups still
// work.
func TestBroken(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, replylog.Options{})
	put(t, l, done("kept", base, "1"), base)
	replylog.BreakActive(l)
	if err := l.Put(context.Background(), done("lost", base, "2"), base); err == nil {
		t.Fatal("Put on a failed segment: no error")
	}
	if err := l.Put(context.Background(), done("later", base, "3"), base); err == nil {
		t.Fatal("Put after a failed write: no error")
	}
	want(t, l, "lost", base, idempotency.Record{})
	l.Close()
	l = open(t, dir, replylog.Options{})
	want(t, l, "kept", base, done("kept", base, "1"))
	put(t, l, done("later", base, "3"), base)
}

func TestClosed(t *testing.T) {
	l := open(t, t.TempDir(), replylog.Options{})
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := l.Put(context.Background(), done("s", base, "x"), base); err == nil {
		t.Fatal("Put after Close: no error")
	}
	if _, _, err := l.Lookup(context.Background(), "s", base); err == nil {
		t.Fatal("Lookup after Close: no error")
	}
	if _, err := l.Sweep(base); err == nil {
		t.Fatal("Sweep after Close: no error")
	}
}

// TestPutCancelled: a put whose context ends while it waits returns at
// once; the record may still be stored, but never half.
func TestPutCancelled(t *testing.T) {
	l := open(t, t.TempDir(), replylog.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := l.Put(ctx, done("s", base, "x"), base)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Put: %v", err)
	}
	got, found, lerr := l.Lookup(context.Background(), "s", base)
	if lerr == nil && !found && err == nil {
		t.Fatalf("Put returned nil but the record is missing")
	}
	if found && !reflect.DeepEqual(got, done("s", base, "x")) {
		t.Fatalf("half a record: %+v", got)
	}
}

func TestOpenErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := replylog.Open(file, replylog.Options{}); err == nil {
		t.Fatal("Open on a file: no error")
	}
	if _, err := replylog.Open(t.TempDir(), replylog.Options{SegmentBytes: 1 << 41}); err == nil {
		t.Fatal("Open with segments beyond the offset range: no error")
	}
}

// TestCompactedIndex: once a segment is sealed its index leaves the map for
// sorted arrays; lookups still find each scope's newest record, across
// segments and through hash collisions, before and after a reopen and a
// sweep.
func TestCompactedIndex(t *testing.T) {
	for _, collide := range []bool{false, true} {
		t.Run(fmt.Sprint("collide=", collide), func(t *testing.T) {
			if collide {
				replylog.ForceHash(t, func(s string) uint64 { return uint64(len(s)) % 3 })
			}
			dir := t.TempDir()
			o := replylog.Options{SegmentBytes: 512} // a few records each
			l := open(t, dir, o)
			day := idempotency.Retention
			// Day 0: 40 scopes; day 1: every other one again (the first
			// expired), in later segments.
			for i := range 40 {
				s := fmt.Sprint("scope-", i)
				put(t, l, done(s, base, "day0-"+s), base)
			}
			for i := 0; i < 40; i += 2 {
				s := fmt.Sprint("scope-", i)
				put(t, l, done(s, base.Add(day), "day1-"+s), base.Add(day))
			}
			check := func(l *replylog.Log) {
				t.Helper()
				for i := range 40 {
					s := fmt.Sprint("scope-", i)
					if i%2 == 0 {
						want(t, l, s, base.Add(day), done(s, base.Add(day), "day1-"+s))
					} else {
						want(t, l, s, base, done(s, base, "day0-"+s))
						want(t, l, s, base.Add(day), idempotency.Record{})
					}
				}
				want(t, l, "scope-x", base, idempotency.Record{})
			}
			check(l)
			if s := l.Stats(); s.Compacted == 0 || s.Segments < 10 || !collide && s.Indexed > s.Compacted {
				t.Fatalf("stats %+v: want many segments, most of their scopes compacted", s)
			}
			if err := l.Put(context.Background(), done("scope-3", base, "again"), base); !errors.Is(err, replylog.ErrLive) {
				t.Fatalf("Put over a live record in a compacted segment: %v", err)
			}
			l.Close()
			l = open(t, dir, o)
			check(l)
			if s := l.Stats(); s.Indexed != 0 {
				t.Fatalf("stats %+v after reopen: every record read is compacted", s)
			}
			// The day-0 segments go; the day-1 records stay found.
			if _, err := l.Sweep(base.Add(day + time.Minute)); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 40; i += 2 {
				s := fmt.Sprint("scope-", i)
				want(t, l, s, base.Add(day), done(s, base.Add(day), "day1-"+s))
			}
		})
	}
}
