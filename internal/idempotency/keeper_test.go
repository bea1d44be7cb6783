package idempotency_test

import (
	"context"
	"errors"
	"fmt"
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

type env struct {
	st    *sqlitestore.Store
	clock *testkit.Clock
	k     *idempotency.Keeper
}

func newEnv(t testing.TB) *env {
	t.Helper()
	clock := testkit.NewClock(epoch)
	st, err := sqlitestore.Open(context.Background(), t.TempDir(), clock.Now)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &env{st: st, clock: clock, k: idempotency.New(st, clock.Now)}
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
	e := newEnv(t)
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
}

func TestDoStoresErrorsReplies(t *testing.T) {
	e := newEnv(t)
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
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
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

func TestDoInProgress(t *testing.T) {
	e := newEnv(t)
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
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
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

func TestDoReleasesOnPanic(t *testing.T) {
	e := newEnv(t)
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
}

func TestDoSettlesAfterCancel(t *testing.T) {
	e := newEnv(t)
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
}

func TestDoExpiry(t *testing.T) {
	e := newEnv(t)
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
}

// TestDoStaleClaim: a process that crashed mid-call left its record in
// progress; it blocks the key only until LockedUntil.
func TestDoStaleClaim(t *testing.T) {
	e := newEnv(t)
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
}

func TestDoClaimWindows(t *testing.T) {
	e := newEnv(t)
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
	e := newEnv(t)
	var c counter
	_, _, err := e.k.Do(context.Background(), verifyReq("bad key", `{}`, "1"), c.fn("1"))
	if evs.ErrorCode(err) != evs.CodeInvalidRequest || c.runs.Load() != 0 {
		t.Fatalf("invalid key: %v runs=%d", err, c.runs.Load())
	}
}

func TestDoStoreFailures(t *testing.T) {
	down := evs.Wrap(errors.New("connection refused"), evs.CodeUnavailable, "The store is unavailable.")
	tests := []struct {
		name      string
		st        failingStore
		wantReply bool
	}{
		{"claim", failingStore{claim: down}, false},
		{"complete", failingStore{complete: down}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			tt.st.Store = e.st
			k := idempotency.New(tt.st, e.clock.Now)
			var c counter
			r, _, err := k.Do(context.Background(), verifyReq("k", `{}`, "1"), c.fn("1"))
			if !errors.Is(err, down) || evs.ErrorCode(err) != evs.CodeUnavailable {
				t.Fatalf("err %v, want the store's unavailable error", err)
			}
			if (r.StatusCode == 200) != tt.wantReply {
				t.Fatalf("reply %d, want one=%v", r.StatusCode, tt.wantReply)
			}
		})
	}
	t.Run("release", func(t *testing.T) {
		e := newEnv(t)
		k := idempotency.New(failingStore{Store: e.st, release: down}, e.clock.Now)
		boom := errors.New("boom")
		c := counter{err: boom}
		_, _, err := k.Do(context.Background(), verifyReq("k", `{}`, "1"), c.fn("1"))
		if !errors.Is(err, boom) || !errors.Is(err, down) {
			t.Fatalf("err %v, want both the handler's and the store's", err)
		}
	})
	t.Run("closed store", func(t *testing.T) {
		e := newEnv(t)
		_ = e.st.Close()
		var c counter
		_, _, err := e.k.Do(context.Background(), verifyReq("k", `{}`, "1"), c.fn("1"))
		if err == nil || c.runs.Load() != 0 {
			t.Fatalf("closed store: err=%v runs=%d", err, c.runs.Load())
		}
	})
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
}

func (f failingStore) ClaimIdempotency(ctx context.Context, rec idempotency.Record, now time.Time) (idempotency.Record, bool, error) {
	if f.claim != nil {
		return idempotency.Record{}, false, f.claim
	}
	return f.Store.ClaimIdempotency(ctx, rec, now)
}

func (f failingStore) CompleteIdempotency(ctx context.Context, scope string, status int, h map[string]string, body []byte) error {
	if f.complete != nil {
		return f.complete
	}
	return f.Store.CompleteIdempotency(ctx, scope, status, h, body)
}

func (f failingStore) ReleaseIdempotency(ctx context.Context, scope string) error {
	if f.release != nil {
		return f.release
	}
	return f.Store.ReleaseIdempotency(ctx, scope)
}

// TestDoConcurrent fires one key from 50 goroutines: the handler runs once;
// every other call replays or is told the first is in progress.
func TestDoConcurrent(t *testing.T) {
	e := newEnv(t)
	var runs atomic.Int32
	fn := func(context.Context) (idempotency.Reply, error) {
		runs.Add(1)
		time.Sleep(20 * time.Millisecond) // keep the first call in progress
		return idempotency.Reply{StatusCode: 200, Body: []byte(`{"run":"first"}`)}, nil
	}
	const n = 50
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
		})
	}
	close(gate)
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
}
