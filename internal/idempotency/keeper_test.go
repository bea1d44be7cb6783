package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

var epoch = time.Date(2026, 11, 22, 10, 4, 5, 0, time.UTC)

// mode is one way of running a Keeper on the SQLite store: as the Lambda
// functions do on DynamoDB (shared: many processes, claims in the store),
// or as evs serve does (local: one process holding the serve lock, claims
// in memory). Both must answer every call alike.
type mode struct {
	name   string
	open   func(ctx context.Context, dir string, now func() time.Time) (*sqlitestore.Store, error)
	keeper func(st *sqlitestore.Store, now func() time.Time) *idempotency.Keeper
}

var (
	shared = mode{"shared", sqlitestore.Open, func(st *sqlitestore.Store, now func() time.Time) *idempotency.Keeper {
		return idempotency.New(st, now)
	}}
	local = mode{"local", sqlitestore.OpenServing, func(st *sqlitestore.Store, now func() time.Time) *idempotency.Keeper {
		return idempotency.NewLocal(st, now)
	}}
	modes = []mode{shared, local}
)

type env struct {
	dir   string
	st    *sqlitestore.Store
	clock *testkit.Clock
	k     *idempotency.Keeper
}

func newEnv(t testing.TB, m mode) *env {
	t.Helper()
	clock := testkit.NewClock(epoch)
	dir := freshStoreDir(t)
	st, err := m.open(context.Background(), dir, clock.Now)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &env{dir: dir, st: st, clock: clock, k: m.keeper(st, clock.Now)}
}

// eachMode runs f once per mode, each time on a fresh store.
func eachMode(t *testing.T, f func(t *testing.T, e *env)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { f(t, newEnv(t, m)) })
	}
}

// verifyReq is a /v1/verify call with an Idempotency-Key and a body. The
// call's name is for the reader only: request ids are the edge's business,
// and replies are kept without them.
func verifyReq(key, body, _ string) idempotency.Request {
	return idempotency.Request{
		AccountID: "acct-1", Method: "POST", Path: "/v1/verify", Key: key,
		ContentType: "application/json", Body: []byte(body),
	}
}

// counter is a handler that counts its runs and answers with a body naming
// the run and the call that ran it.
type counter struct {
	runs   atomic.Int32
	status int
	err    error
}

func (c *counter) fn(rid string) func(context.Context) (idempotency.Reply, error) {
	return func(context.Context) (idempotency.Reply, error) {
		n := c.runs.Add(1)
		status := c.status
		if status == 0 {
			status = 200
		}
		return idempotency.Reply{
			StatusCode: status,
			Headers:    map[string]string{"Content-Type": "application/json"},
			Body:       fmt.Appendf(nil, `{"by":%q,"run":%d}`, rid, n),
		}, c.err
	}
}

func TestDoFirstCallAndReplay(t *testing.T) {
	eachMode(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var c counter
		r, replayed, err := e.k.Do(ctx, verifyReq("k1", `{"email":"a@x.example"}`, "rid-1"), c.fn("rid-1"))
		if err != nil || replayed || r.StatusCode != 200 || string(r.Body) != `{"by":"rid-1","run":1}` {
			t.Fatalf("first call: %+v replayed=%v err=%v", r, replayed, err)
		}
		if _, ok := r.Headers[idempotency.ReplayedHeader]; ok {
			t.Fatal("first call marked as replayed")
		}
		// Same request in another layout: a replay of the stored reply, as it
		// was stored (the edge renders this call's id into it).
		r2, replayed, err := e.k.Do(ctx, verifyReq("k1", ` { "email" : "a@x.example" } `, "rid-2"), c.fn("rid-2"))
		if err != nil || !replayed {
			t.Fatalf("replay: replayed=%v err=%v", replayed, err)
		}
		if c.runs.Load() != 1 {
			t.Fatalf("handler ran %d times", c.runs.Load())
		}
		if r2.StatusCode != 200 || string(r2.Body) != `{"by":"rid-1","run":1}` {
			t.Fatalf("replayed reply: %d %s", r2.StatusCode, r2.Body)
		}
		if r2.Headers[idempotency.ReplayedHeader] != "true" || r2.Headers["Content-Type"] != "application/json" {
			t.Fatalf("replayed headers: %v", r2.Headers)
		}
		// The replay's headers are a fresh map each time.
		r2.Headers["Content-Type"] = "mutated"
		r3, _, err := e.k.Do(ctx, verifyReq("k1", `{"email":"a@x.example"}`, "rid-3"), c.fn("rid-3"))
		if err != nil || r3.Headers["Content-Type"] != "application/json" || r.Headers[idempotency.ReplayedHeader] != "" {
			t.Fatalf("headers shared between replies: %v / %v (err %v)", r3.Headers, r.Headers, err)
		}
	})
}

func TestDoStoresErrorsReplies(t *testing.T) {
	eachMode(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := counter{status: 400}
		body := `{"code":"invalid_request","message":"bad"}`
		fn := func(context.Context) (idempotency.Reply, error) {
			c.runs.Add(1)
			return idempotency.Reply{StatusCode: 400, Body: []byte(body)}, nil
		}
		if _, _, err := e.k.Do(ctx, verifyReq("k", `{}`, "rid-1"), fn); err != nil {
			t.Fatal(err)
		}
		r, replayed, err := e.k.Do(ctx, verifyReq("k", `{}`, "rid-2"), fn)
		if err != nil || !replayed || r.StatusCode != 400 || c.runs.Load() != 1 {
			t.Fatalf("4xx replay: %d replayed=%v err=%v runs=%d", r.StatusCode, replayed, err, c.runs.Load())
		}
		if want := body; string(r.Body) != want {
			t.Fatalf("replayed error body %s, want %s", r.Body, want)
		}
		if r.Headers[idempotency.ReplayedHeader] != "true" {
			t.Fatalf("replay of a reply stored without headers: %v", r.Headers)
		}
	})
}

func TestDoConflicts(t *testing.T) {
	tests := []struct {
		name string
		// first is the stored request; second the repeat.
		first, second idempotency.Request
		wantCode      string
		wantReplay    bool
	}{
		{"different body", verifyReq("k", `{"email":"a@x.example"}`, "1"), verifyReq("k", `{"email":"b@x.example"}`, "2"), evs.CodeIdempotencyKeyReused, false},
		{"different content type", verifyReq("k", `{"a":1}`, "1"), func() idempotency.Request {
			r := verifyReq("k", `{"a":1}`, "2")
			r.ContentType = "text/plain"
			return r
		}(), evs.CodeIdempotencyKeyReused, false},
		{"other key is fresh", verifyReq("k", `{}`, "1"), verifyReq("k2", `{}`, "2"), "", false},
		{"other account is fresh", verifyReq("k", `{}`, "1"), func() idempotency.Request {
			r := verifyReq("k", `{}`, "2")
			r.AccountID = "acct-2"
			return r
		}(), "", false},
		{"other path is fresh", verifyReq("k", `{}`, "1"), func() idempotency.Request {
			r := verifyReq("k", `{}`, "2")
			r.Path = "/v1/requests"
			return r
		}(), "", false},
		{"same request replays", verifyReq("k", `{"a":1,"b":2}`, "1"), verifyReq("k", `{"b":2,"a":1}`, "2"), "", true},
	}
	for _, m := range modes {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				e := newEnv(t, m)
				var c counter
				if _, _, err := e.k.Do(context.Background(), tt.first, c.fn("first")); err != nil {
					t.Fatal(err)
				}
				_, replayed, err := e.k.Do(context.Background(), tt.second, c.fn("second"))
				if code := evs.ErrorCode(err); code != tt.wantCode {
					t.Fatalf("code %q (%v), want %q", code, err, tt.wantCode)
				}
				if replayed != tt.wantReplay {
					t.Fatalf("replayed=%v, want %v", replayed, tt.wantReplay)
				}
				wantRuns := int32(2)
				if tt.wantCode != "" || tt.wantReplay {
					wantRuns = 1
				}
				if c.runs.Load() != wantRuns {
					t.Fatalf("handler ran %d times, want %d", c.runs.Load(), wantRuns)
				}
			})
		}
	}
}

func TestDoInProgress(t *testing.T) {
	eachMode(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var inner error
		var innerReplayed bool
		var c counter
		_, _, err := e.k.Do(ctx, verifyReq("k", `{}`, "1"), func(ctx context.Context) (idempotency.Reply, error) {
			// While the first call runs, a repeat is refused: also a
			// different request, which is checked first.
			_, innerReplayed, inner = e.k.Do(ctx, verifyReq("k", `{}`, "2"), c.fn("2"))
			if _, _, err := e.k.Do(ctx, verifyReq("k", `{"x":1}`, "3"), c.fn("3")); evs.ErrorCode(err) != evs.CodeIdempotencyKeyReused {
				t.Errorf("different request while in progress: %v, want %s", err, evs.CodeIdempotencyKeyReused)
			}
			return idempotency.Reply{StatusCode: 200, Body: []byte(`{}`)}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if evs.ErrorCode(inner) != evs.CodeIdempotencyInProgress || innerReplayed || c.runs.Load() != 0 {
			t.Fatalf("repeat while in progress: %v replayed=%v runs=%d", inner, innerReplayed, c.runs.Load())
		}
	})
}

func TestDoReleasesOnFailure(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		status  int
		err     error
		wantErr error
	}{
		{"500", 500, nil, nil},
		{"503", 503, nil, nil},
		{"handler error", 200, boom, boom},
		{"classified handler error", 0, evs.Wrap(boom, evs.CodeUnavailable, "down"), boom},
	}
	for _, m := range modes {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				e := newEnv(t, m)
				c := counter{status: tt.status, err: tt.err}
				r, replayed, err := e.k.Do(context.Background(), verifyReq("k", `{}`, "1"), c.fn("1"))
				if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) || replayed {
					t.Fatalf("failed call: err=%v replayed=%v, want %v", err, replayed, tt.wantErr)
				}
				if tt.status >= 500 && r.StatusCode != tt.status {
					t.Fatalf("fn's reply not returned: %d", r.StatusCode)
				}
				// The key is free: the retry runs the handler again.
				ok := counter{}
				r, replayed, err = e.k.Do(context.Background(), verifyReq("k", `{}`, "2"), ok.fn("2"))
				if err != nil || replayed || r.StatusCode != 200 || ok.runs.Load() != 1 {
					t.Fatalf("retry after failure: %d replayed=%v err=%v runs=%d", r.StatusCode, replayed, err, ok.runs.Load())
				}
			})
		}
	}
}

func TestDoReleasesOnPanic(t *testing.T) {
	eachMode(t, func(t *testing.T, e *env) {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("panic swallowed")
				}
			}()
			_, _, _ = e.k.Do(context.Background(), verifyReq("k", `{}`, "1"), func(context.Context) (idempotency.Reply, error) {
				panic("handler bug")
			})
		}()
		var c counter
		if _, replayed, err := e.k.Do(context.Background(), verifyReq("k", `{}`, "2"), c.fn("2")); err != nil || replayed || c.runs.Load() != 1 {
			t.Fatalf("retry after panic: replayed=%v err=%v runs=%d", replayed, err, c.runs.Load())
		}
	})
}

func TestDoSettlesAfterCancel(t *testing.T) {
	eachMode(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		var c counter
		_, _, err := e.k.Do(ctx, verifyReq("k", `{}`, "1"), func(ctx context.Context) (idempotency.Reply, error) {
			cancel() // the client hung up once the work was done
			return c.fn("1")(ctx)
		})
		if err != nil {
			t.Fatalf("completing after the client left: %v", err)
		}
		if _, replayed, err := e.k.Do(context.Background(), verifyReq("k", `{}`, "2"), c.fn("2")); err != nil || !replayed || c.runs.Load() != 1 {
			t.Fatalf("repeat: replayed=%v err=%v runs=%d", replayed, err, c.runs.Load())
		}
	})
}

func TestDoExpiry(t *testing.T) {
	eachMode(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var c counter
		if _, _, err := e.k.Do(ctx, verifyReq("k", `{"a":1}`, "1"), c.fn("1")); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(idempotency.Retention - time.Millisecond)
		if _, replayed, err := e.k.Do(ctx, verifyReq("k", `{"a":1}`, "2"), c.fn("2")); err != nil || !replayed {
			t.Fatalf("just before 24 h: replayed=%v err=%v", replayed, err)
		}
		e.clock.Advance(time.Millisecond)
		// After 24 h the key is forgotten, even for another request.
		r, replayed, err := e.k.Do(ctx, verifyReq("k", `{"a":2}`, "3"), c.fn("3"))
		if err != nil || replayed || c.runs.Load() != 2 || string(r.Body) != `{"by":"3","run":2}` {
			t.Fatalf("after 24 h: %s replayed=%v err=%v runs=%d", r.Body, replayed, err, c.runs.Load())
		}
	})
}

// TestDoStaleClaim: a process that crashed mid-call left its record in
// progress; it blocks the key only until LockedUntil.
func TestDoStaleClaim(t *testing.T) {
	eachMode(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		req := verifyReq("k", `{}`, "1")
		now := e.clock.Now()
		_, claimed, err := e.st.ClaimIdempotency(ctx, idempotency.Record{
			Scope:       idempotency.Scope(req.AccountID, req.Method, req.Path, req.Key),
			Fingerprint: idempotency.Fingerprint(req.Method, req.Path, req.ContentType, req.Body),
			State:       idempotency.InProgress,
			LockedUntil: now.Add(idempotency.LockTimeout),
			ExpiresAt:   now.Add(idempotency.Retention),
		}, now)
		if err != nil || !claimed {
			t.Fatalf("crashed call's claim: %v %v", claimed, err)
		}
		var c counter
		e.clock.Advance(idempotency.LockTimeout - time.Millisecond)
		if _, _, err := e.k.Do(ctx, req, c.fn("1")); evs.ErrorCode(err) != evs.CodeIdempotencyInProgress {
			t.Fatalf("before LockedUntil: %v, want in progress", err)
		}
		e.clock.Advance(time.Millisecond)
		if _, replayed, err := e.k.Do(ctx, req, c.fn("1")); err != nil || replayed || c.runs.Load() != 1 {
			t.Fatalf("after LockedUntil: replayed=%v err=%v runs=%d", replayed, err, c.runs.Load())
		}
	})
}

func TestDoClaimWindows(t *testing.T) {
	e := newEnv(t, shared)
	ctx := context.Background()
	req := verifyReq("k", `{}`, "1")
	var got idempotency.Record
	spy := spyStore{Store: e.st, claimed: &got}
	k := idempotency.New(spy, e.clock.Now)
	var c counter
	if _, _, err := k.Do(ctx, req, c.fn("1")); err != nil {
		t.Fatal(err)
	}
	now := e.clock.Now()
	if got.State != idempotency.InProgress || !got.LockedUntil.Equal(now.Add(5*time.Minute)) || !got.ExpiresAt.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("claimed record %+v", got)
	}
	if got.Scope != "acct-1\x00POST /v1/verify\x00k" {
		t.Fatalf("scope %q", got.Scope)
	}
}

func TestDoInvalidKey(t *testing.T) {
	eachMode(t, func(t *testing.T, e *env) {
		var c counter
		_, _, err := e.k.Do(context.Background(), verifyReq("bad key", `{}`, "1"), c.fn("1"))
		if evs.ErrorCode(err) != evs.CodeInvalidRequest || c.runs.Load() != 0 {
			t.Fatalf("invalid key: %v runs=%d", err, c.runs.Load())
		}
	})
}

func TestDoStoreFailures(t *testing.T) {
	down := evs.Wrap(errors.New("connection refused"), evs.CodeUnavailable, "The store is unavailable.")
	boom := errors.New("boom")
	tests := []struct {
		name   string
		mode   mode
		keeper func(e *env) *idempotency.Keeper
		fnErr  error
		// What the failing call returns: the errors it carries, whether
		// fn's reply comes with them, and how often fn ran.
		wantErrs  []error
		wantReply bool
		wantRuns  int32
		// retry: the store recovers, and a retry on the same Keeper runs
		// fn, then the next call replays (the key was left free).
		retry bool
	}{
		{name: "shared/claim", mode: shared, keeper: func(e *env) *idempotency.Keeper {
			return idempotency.New(&failingStore{Store: e.st, claim: down}, e.clock.Now)
		}, wantErrs: []error{down}},
		{name: "shared/complete", mode: shared, keeper: func(e *env) *idempotency.Keeper {
			return idempotency.New(&failingStore{Store: e.st, complete: down, once: true}, e.clock.Now)
		}, wantErrs: []error{down}, wantReply: true, wantRuns: 1, retry: true},
		{name: "shared/release", mode: shared, keeper: func(e *env) *idempotency.Keeper {
			return idempotency.New(&failingStore{Store: e.st, release: down}, e.clock.Now)
		}, fnErr: boom, wantErrs: []error{boom, down}, wantReply: true, wantRuns: 1},
		{name: "local/lookup", mode: local, keeper: func(e *env) *idempotency.Keeper {
			return idempotency.NewLocal(&failingLocal{LocalStore: e.st, lookup: down}, e.clock.Now)
		}, wantErrs: []error{down}, retry: true},
		{name: "local/put", mode: local, keeper: func(e *env) *idempotency.Keeper {
			return idempotency.NewLocal(&failingLocal{LocalStore: e.st, put: down}, e.clock.Now)
		}, wantErrs: []error{down}, wantReply: true, wantRuns: 1, retry: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.mode)
			k := tt.keeper(e)
			c := counter{err: tt.fnErr}
			r, replayed, err := k.Do(context.Background(), verifyReq("k", `{}`, "1"), c.fn("1"))
			for _, want := range tt.wantErrs {
				if !errors.Is(err, want) {
					t.Fatalf("err %v, want it to carry %v", err, want)
				}
			}
			if tt.fnErr == nil && evs.ErrorCode(err) != evs.CodeUnavailable {
				t.Fatalf("err %v, want the store's unavailable error", err)
			}
			if replayed || (r.StatusCode == 200) != tt.wantReply || c.runs.Load() != tt.wantRuns {
				t.Fatalf("reply %d replayed=%v runs=%d; want a reply=%v, runs=%d", r.StatusCode, replayed, c.runs.Load(), tt.wantReply, tt.wantRuns)
			}
			if !tt.retry {
				return
			}
			r, replayed, err = k.Do(context.Background(), verifyReq("k", `{}`, "2"), c.fn("2"))
			if err != nil || replayed || c.runs.Load() != tt.wantRuns+1 {
				t.Fatalf("retry once the store is back: %d replayed=%v err=%v runs=%d", r.StatusCode, replayed, err, c.runs.Load())
			}
			if _, replayed, err = k.Do(context.Background(), verifyReq("k", `{}`, "3"), c.fn("3")); err != nil || !replayed {
				t.Fatalf("repeat of the retry: replayed=%v err=%v", replayed, err)
			}
		})
	}
	eachMode(t, func(t *testing.T, e *env) {
		_ = e.st.Close()
		var c counter
		_, _, err := e.k.Do(context.Background(), verifyReq("k", `{}`, "1"), c.fn("1"))
		if err == nil || c.runs.Load() != 0 {
			t.Fatalf("closed store: err=%v runs=%d", err, c.runs.Load())
		}
	})
}

// failingLocal fails the first lookup or put it is told to, then passes
// calls on: a store that was down for a moment.
type failingLocal struct {
	idempotency.LocalStore
	mu          sync.Mutex
	lookup, put error
}

func (f *failingLocal) LookupIdempotency(ctx context.Context, scope string, now time.Time) (idempotency.Record, bool, error) {
	f.mu.Lock()
	err := f.lookup
	f.lookup = nil
	f.mu.Unlock()
	if err != nil {
		return idempotency.Record{}, false, err
	}
	return f.LocalStore.LookupIdempotency(ctx, scope, now)
}

func (f *failingLocal) PutIdempotency(ctx context.Context, rec idempotency.Record, now time.Time) error {
	f.mu.Lock()
	err := f.put
	f.put = nil
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.LocalStore.PutIdempotency(ctx, rec, now)
}

// hookedLocal calls onLookup after each lookup, before its answer is
// returned, and onPut before each put, which it records.
type hookedLocal struct {
	idempotency.LocalStore
	onLookup, onPut func()
	mu              sync.Mutex
	puts            []idempotency.Record
}

func (h *hookedLocal) LookupIdempotency(ctx context.Context, scope string, now time.Time) (idempotency.Record, bool, error) {
	rec, found, err := h.LocalStore.LookupIdempotency(ctx, scope, now)
	if h.onLookup != nil {
		h.onLookup()
	}
	return rec, found, err
}

func (h *hookedLocal) PutIdempotency(ctx context.Context, rec idempotency.Record, now time.Time) error {
	h.mu.Lock()
	h.puts = append(h.puts, rec)
	h.mu.Unlock()
	if h.onPut != nil {
		h.onPut()
	}
	return h.LocalStore.PutIdempotency(ctx, rec, now)
}

// TestLocalWritesOnlyTheReply: in local mode nothing is written while fn
// runs (a crash then leaves the key free), and the one write is the
// finished record.
func TestLocalWritesOnlyTheReply(t *testing.T) {
	e := newEnv(t, local)
	ctx := context.Background()
	spy := &hookedLocal{LocalStore: e.st}
	k := idempotency.NewLocal(spy, e.clock.Now)
	req := verifyReq("k", `{"email":"a@x.example"}`, "1")
	scope := idempotency.Scope(req.AccountID, req.Method, req.Path, req.Key)
	now := e.clock.Now()
	_, _, err := k.Do(ctx, req, func(ctx context.Context) (idempotency.Reply, error) {
		if rec, found, err := e.st.LookupIdempotency(ctx, scope, now); err != nil || found {
			t.Errorf("while fn runs the store holds %+v (found=%v err=%v), want nothing", rec, found, err)
		}
		return idempotency.Reply{StatusCode: 201, Headers: map[string]string{"Location": "/x"}, Body: []byte(`{"id":"x"}`)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := idempotency.Record{
		Scope: scope, Fingerprint: idempotency.Fingerprint(req.Method, req.Path, req.ContentType, req.Body),
		State: idempotency.Done, LockedUntil: now, ExpiresAt: now.Add(24 * time.Hour),
		StatusCode: 201, Headers: map[string]string{"Location": "/x"}, Body: []byte(`{"id":"x"}`),
	}
	if len(spy.puts) != 1 || !reflect.DeepEqual(spy.puts[0], want) {
		t.Fatalf("puts %+v, want one: %+v", spy.puts, want)
	}
}

// TestLocalRepeatWhileRunning: a repeat that arrives while the first call
// runs is refused with 409 without running fn, and it is decided by the
// in-memory claim, before any lookup: were the store looked up first, the
// first call could store its reply and free its claim between that lookup
// and the repeat's claim, and the repeat would run fn a second time. The
// lookup hook stages exactly that interleaving for any lookup made while
// the first call holds its claim.
func TestLocalRepeatWhileRunning(t *testing.T) {
	e := newEnv(t, local)
	ctx := context.Background()
	req := verifyReq("k", `{"email":"a@x.example"}`, "1")
	var (
		runs      atomic.Int32
		started   = make(chan struct{})
		proceed   = make(chan struct{})
		firstDone = make(chan struct{})
		lookups   atomic.Int32
		once      sync.Once
	)
	finishFirst := func() { once.Do(func() { close(proceed) }) }
	spy := &hookedLocal{LocalStore: e.st, onLookup: func() {
		if lookups.Add(1) > 1 {
			// A lookup after the first call's: let the first call
			// store its reply and free its claim before this lookup
			// answers (with what it read before).
			finishFirst()
			<-firstDone
		}
	}}
	k := idempotency.NewLocal(spy, e.clock.Now)
	go func() {
		defer close(firstDone)
		_, _, err := k.Do(ctx, req, func(context.Context) (idempotency.Reply, error) {
			runs.Add(1)
			close(started)
			<-proceed
			return idempotency.Reply{StatusCode: 200, Body: []byte(`{"run":1}`)}, nil
		})
		if err != nil {
			t.Errorf("first call: %v", err)
		}
	}()
	<-started
	r, replayed, err := k.Do(ctx, req, func(context.Context) (idempotency.Reply, error) {
		runs.Add(1)
		return idempotency.Reply{StatusCode: 200, Body: []byte(`{"run":2}`)}, nil
	})
	finishFirst()
	<-firstDone
	if evs.ErrorCode(err) != evs.CodeIdempotencyInProgress || replayed || r.StatusCode != 0 {
		t.Fatalf("repeat while the first call runs: %d replayed=%v err=%v, want %s", r.StatusCode, replayed, err, evs.CodeIdempotencyInProgress)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1", n)
	}
	// Once the first call has returned, the repeat replays its reply.
	r, replayed, err = k.Do(ctx, req, func(context.Context) (idempotency.Reply, error) {
		runs.Add(1)
		return idempotency.Reply{}, nil
	})
	if err != nil || !replayed || string(r.Body) != `{"run":1}` || runs.Load() != 1 {
		t.Fatalf("repeat after the first call: %s replayed=%v err=%v runs=%d", r.Body, replayed, err, runs.Load())
	}
}

// TestLocalClaimHeldUntilStored: a repeat that arrives after fn returned but
// before its reply is stored is still refused with 409; were the claim freed
// first, the repeat would find no record and run fn again.
func TestLocalClaimHeldUntilStored(t *testing.T) {
	e := newEnv(t, local)
	ctx := context.Background()
	req := verifyReq("k", `{}`, "1")
	var c counter
	var k *idempotency.Keeper
	var (
		repeatErr error
		fired     atomic.Bool // the repeat's own put, if any, repeats nothing
	)
	k = idempotency.NewLocal(&hookedLocal{LocalStore: e.st, onPut: func() {
		if fired.CompareAndSwap(false, true) {
			_, _, repeatErr = k.Do(ctx, req, c.fn("2"))
		}
	}}, e.clock.Now)
	if _, _, err := k.Do(ctx, req, c.fn("1")); err != nil {
		t.Fatal(err)
	}
	if evs.ErrorCode(repeatErr) != evs.CodeIdempotencyInProgress || c.runs.Load() != 1 {
		t.Fatalf("repeat while the reply is being stored: %v runs=%d, want %s and 1 run", repeatErr, c.runs.Load(), evs.CodeIdempotencyInProgress)
	}
}

// TestLocalRestart: a reply stored by a local Keeper is replayed by the
// next server on the same directory (a fresh Keeper over the reopened
// store); fn does not run again.
func TestLocalRestart(t *testing.T) {
	e := newEnv(t, local)
	ctx := context.Background()
	var c counter
	req := verifyReq("k", `{"email":"a@x.example"}`, "1")
	if _, _, err := e.k.Do(ctx, req, c.fn("1")); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.OpenServing(ctx, e.dir, e.clock.Now)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer st.Close()
	k := idempotency.NewLocal(st, e.clock.Now)
	r, replayed, err := k.Do(ctx, req, c.fn("2"))
	if err != nil || !replayed || string(r.Body) != `{"by":"1","run":1}` || c.runs.Load() != 1 {
		t.Fatalf("after restart: %s replayed=%v err=%v runs=%d", r.Body, replayed, err, c.runs.Load())
	}
	if _, _, err := k.Do(ctx, verifyReq("k", `{"email":"b@x.example"}`, "3"), c.fn("3")); evs.ErrorCode(err) != evs.CodeIdempotencyKeyReused {
		t.Fatalf("other request after restart: %v, want %s", err, evs.CodeIdempotencyKeyReused)
	}
}

type spyStore struct {
	idempotency.Store
	claimed *idempotency.Record
}

func (s spyStore) ClaimIdempotency(ctx context.Context, rec idempotency.Record, now time.Time) (idempotency.Record, bool, error) {
	*s.claimed = rec
	return s.Store.ClaimIdempotency(ctx, rec, now)
}

type failingStore struct {
	idempotency.Store
	claim, complete, release error
	// once: complete fails only the first time (a store down for a
	// moment); the store must then be used through a pointer.
	once bool
}

func (f *failingStore) ClaimIdempotency(ctx context.Context, rec idempotency.Record, now time.Time) (idempotency.Record, bool, error) {
	if f.claim != nil {
		return idempotency.Record{}, false, f.claim
	}
	return f.Store.ClaimIdempotency(ctx, rec, now)
}

func (f *failingStore) CompleteIdempotency(ctx context.Context, scope string, status int, h map[string]string, body []byte) error {
	if err := f.complete; err != nil {
		if f.once {
			f.complete = nil
		}
		return err
	}
	return f.Store.CompleteIdempotency(ctx, scope, status, h, body)
}

func (f *failingStore) ReleaseIdempotency(ctx context.Context, scope string) error {
	if f.release != nil {
		return f.release
	}
	return f.Store.ReleaseIdempotency(ctx, scope)
}

// TestDoConcurrent fires one key from 50 goroutines: the handler runs once;
// every other call replays or is told the first is in progress.
func TestDoConcurrent(t *testing.T) {
	eachMode(t, func(t *testing.T, e *env) {
		var runs atomic.Int32
		// The run is held until every other call has its answer: the
		// first call stays in progress throughout.
		release := make(chan struct{})
		var releaseOnce sync.Once
		letGo := func() { releaseOnce.Do(func() { close(release) }) }
		t.Cleanup(letGo)
		fn := func(context.Context) (idempotency.Reply, error) {
			runs.Add(1)
			<-release
			return idempotency.Reply{StatusCode: 200, Body: []byte(`{"run":"first"}`)}, nil
		}
		const n = 50
		answered := make(chan struct{}, n)
		type result struct {
			r        idempotency.Reply
			replayed bool
			err      error
		}
		results := make([]result, n)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-gate
				rid := fmt.Sprintf("rid-%d", i)
				r, replayed, err := e.k.Do(context.Background(), verifyReq("burst", `{"email":"a@x.example"}`, rid), fn)
				results[i] = result{r, replayed, err}
				answered <- struct{}{}
			})
		}
		close(gate)
		for k := 1; k < n; k++ {
			testkit.Receive(t, answered, 20*time.Second, fmt.Sprintf("answer %d of the %d calls beside the one running", k, n-1))
		}
		letGo()
		wg.Wait()
		fresh, replayed, busy := 0, 0, 0
		for i, res := range results {
			switch {
			case res.err == nil && !res.replayed:
				fresh++
			case res.err == nil && res.replayed:
				replayed++
				if want := `{"run":"first"}`; string(res.r.Body) != want {
					t.Errorf("replay %d body %s, want %s", i, res.r.Body, want)
				}
			case evs.ErrorCode(res.err) == evs.CodeIdempotencyInProgress:
				busy++
			default:
				t.Errorf("call %d: %v", i, res.err)
			}
		}
		if fresh != 1 || runs.Load() != 1 {
			t.Fatalf("%d fresh replies, %d runs; want 1 (replayed %d, in progress %d)", fresh, runs.Load(), replayed, busy)
		}
		t.Logf("%d calls: 1 ran, %d replayed, %d in progress", n, replayed, busy)
	})
}

// freshStoreDir is a new directory holding a fresh SQLite store's files.
func freshStoreDir(t testing.TB) string {
	return testkit.FreshDir(t, "sqlite", func(d string) (io.Closer, error) {
		return sqlitestore.Open(context.Background(), d, time.Now)
	})
}
