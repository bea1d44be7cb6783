package batch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// fakeEngine accepts every address, after hold returns (when set). It
// records the addresses it was asked about.
type fakeEngine struct {
	hold func(ctx context.Context, emails []string)
	mu   sync.Mutex
	seen map[string]int
}

func (f *fakeEngine) VerifyDomain(ctx context.Context, emails []string, mode evs.Mode) []evs.Decision {
	if f.hold != nil {
		f.hold(ctx, emails)
	}
	f.mu.Lock()
	if f.seen == nil {
		f.seen = map[string]int{}
	}
	for _, e := range emails {
		f.seen[e]++
	}
	f.mu.Unlock()
	out := make([]evs.Decision, len(emails))
	for i, e := range emails {
		out[i] = evs.Decision{Email: e, Normalized: e, Mode: mode, Reason: evs.ReasonAcceptedEmail,
			Checks: evs.Checks{Syntax: evs.SyntaxCheck{Valid: true}, DNS: evs.DNSCheck{Result: evs.DNSNotChecked, MX: []string{}}, SMTP: evs.SMTPCheck{Result: evs.SMTPAccepted}}}
	}
	return out
}

func (f *fakeEngine) count(e string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[e]
}

// env is a SQLite store and the accounts of a runner test.
type env struct {
	t   *testing.T
	st  *sqlitestore.Store
	ctx context.Context
	n   int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := sqlitestore.Open(ctx, t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &env{t: t, st: st, ctx: ctx}
}

func (e *env) account(test bool) string {
	e.n++
	a := evs.Account{ID: fmt.Sprintf("acct-%d", e.n), Name: fmt.Sprintf("acct-%d", e.n), Test: test, CreatedAt: time.Now()}
	if err := e.st.CreateAccount(e.ctx, a); err != nil {
		e.t.Fatal(err)
	}
	return a.ID
}

// batch stores a queued batch of emails created at created.
func (e *env) batch(acct string, created time.Time, emails ...string) evs.Batch {
	e.t.Helper()
	e.n++
	items := make([]evs.Item, len(emails))
	for i, m := range emails {
		items[i] = evs.Item{Seq: i, Email: m, Domain: m[strings.IndexByte(m, '@')+1:]}
	}
	b := evs.Batch{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", e.n), AccountID: acct, Mode: evs.ModeFull, State: evs.StateQueued,
		CreatedAt: created, ExpiresAt: created.Add(48 * time.Hour), Counters: evs.Counters{Total: len(emails)}}
	if err := e.st.CreateBatch(e.ctx, b, items); err != nil {
		e.t.Fatal(err)
	}
	return b
}

// runner starts a local queue on store st (the env's store unless a
// wrapper).
func (e *env) runner(st batch.LocalStore, engine batch.Verifier, w batch.Worker, rc batch.LocalConfig) *batch.LocalQueue {
	e.t.Helper()
	r, err := batch.NewLocalQueue(st, localWorker(w, e.st, engine), rc)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	e.t.Cleanup(func() { cancel(); r.Wait() })
	if err := r.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	return r
}

// localWorker is w with what a LocalQueue's Worker needs and w leaves
// zero: accounts, the engine and the sandbox, a politeness gate in memory,
// a quiet logger.
func localWorker(w batch.Worker, accounts batch.Accounts, engine batch.Verifier) *batch.Worker {
	w.Accounts = accounts
	if w.Processor == nil {
		w.Processor = &batch.Processor{}
	}
	w.Processor.Engine, w.Processor.Sandbox = engine, verify.NewSandbox(nil)
	if w.Polite == nil {
		w.Polite = &batch.Polite{Gate: &politeness.Gate{}}
	}
	w.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	return &w
}

// wait polls the batch until it is final or limit passes.
func (e *env) wait(b evs.Batch, limit time.Duration) evs.Batch {
	e.t.Helper()
	var got evs.Batch
	testkit.Eventually(e.t, limit, func() error {
		var err error
		if got, err = e.st.Batch(e.ctx, b.AccountID, b.ID); err != nil {
			e.t.Fatal(err)
		}
		if !got.State.Final() {
			return fmt.Errorf("batch %s still %s: %+v", b.ID, got.State, got.Counters)
		}
		return nil
	})
	return got
}

func (e *env) results(b evs.Batch) []evs.Result {
	rs, err := e.st.Results(e.ctx, b.AccountID, b.ID, -1, 1000, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return rs
}

func emails(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("u%d@%s%d.example", i, prefix, i)
	}
	return out
}

// TestRunnerHogDoesNotStarve: an account whose every session hangs holds at
// most its share of the slots; another live account's batch finishes while
// the hog is still stuck, and a test-mode batch never waits at all.
func TestRunnerHogDoesNotStarve(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	defer close(release)
	var held atomic.Int64
	eng := &fakeEngine{hold: func(ctx context.Context, emails []string) {
		if strings.HasPrefix(emails[0], "u") && strings.Contains(emails[0], "@hog") {
			held.Add(1)
			defer held.Add(-1)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	}}
	r := e.runner(e.st, eng, batch.Worker{}, batch.LocalConfig{Workers: 8, PerBatch: 8})
	hog := e.account(false)
	for range 4 {
		if err := r.Enqueue(e.ctx, e.batch(hog, time.Now(), emails("hog", 40)...)); err != nil {
			t.Fatal(err)
		}
	}
	// The hog takes what it can: its share, three quarters of the 8 slots.
	const share = 6
	testkit.Eventually(t, 10*time.Second, testkit.Until(func() bool { return held.Load() >= share }, "the hog holds fewer than its %d sessions", share))
	other, tester := e.account(false), e.account(true)
	live := e.batch(other, time.Now(), emails("live", 3)...)
	sandbox := e.batch(tester, time.Now(), "accepted_email@x.example", "rejected_email@x.example", "timeout@x.example")
	start := time.Now()
	for _, b := range []evs.Batch{live, sandbox} {
		if err := r.Enqueue(e.ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []evs.Batch{live, sandbox} {
		got := e.wait(b, 2*time.Second)
		if got.State != evs.StateCompleted || got.Counters.Processed != 3 {
			t.Fatalf("batch %s: %s %+v", b.ID, got.State, got.Counters)
		}
	}
	if n := held.Load(); n != share {
		t.Fatalf("the hog holds %d sessions, want its share of %d", n, share)
	}
	t.Logf("other accounts done %v after the hog filled its share", time.Since(start))
}

// TestRunnerSessionLimit: a group whose session outlives SessionLimit is
// tried again at the next attempt, not decided by our limit, and ends
// unknown/timeout with the session detail only after the last.
func TestRunnerSessionLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	eng := &fakeEngine{hold: func(ctx context.Context, emails []string) {
		if strings.Contains(emails[0], "@slow") {
			<-ctx.Done()
		}
	}}
	r := e.runner(e.st, eng, batch.Worker{GreyBackoff: 10 * time.Millisecond, Processor: &batch.Processor{SessionLimit: 200 * time.Millisecond, MaxGreyAttempts: 2}}, batch.LocalConfig{})
	b := e.batch(e.account(false), time.Now(), "a@slow.example", "b@slow.example", "c@fast.example")
	if err := r.Enqueue(e.ctx, b); err != nil {
		t.Fatal(err)
	}
	got := e.wait(b, 5*time.Second)
	if got.State != evs.StateCompleted || got.Counters.Unknown != 2 || got.Counters.Deliverable != 1 {
		t.Fatalf("%s %+v", got.State, got.Counters)
	}
	for _, res := range e.results(b) {
		d := res.Decision
		if strings.Contains(res.Email, "@slow") && (d.Reason != evs.ReasonTimeout || d.Checks.SMTP.Result != evs.SMTPTimeout || d.Checks.SMTP.Detail != batch.DetailSession) {
			t.Fatalf("%s: %s %+v", res.Email, d.Reason, d.Checks.SMTP)
		}
		if n := eng.count(res.Email); strings.Contains(res.Email, "@slow") && n != 2 {
			t.Errorf("%s asked %d times, want once per attempt (2)", res.Email, n)
		}
	}
}

// TestRunnerDeadline: a batch past its deadline completes with what is
// left as unknown/timeout, whether the deadline passes while it runs or
// while the service was down.
func TestRunnerDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		created time.Duration // before now
	}{
		{"passes while running", 0},
		{"passed before start", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			const deadline = 500 * time.Millisecond
			// How each hanging session ended: the context's deadline and
			// error when it was cut short.
			type cut struct {
				deadline time.Time
				limited  bool
				err      error
			}
			var mu sync.Mutex
			var cuts []cut
			eng := &fakeEngine{hold: func(ctx context.Context, emails []string) {
				if strings.Contains(emails[0], "@hang") {
					<-ctx.Done()
					dl, ok := ctx.Deadline()
					mu.Lock()
					cuts = append(cuts, cut{dl, ok, ctx.Err()})
					mu.Unlock()
				}
			}}
			r := e.runner(e.st, eng, batch.Worker{Deadline: deadline}, batch.LocalConfig{})
			// The store keeps milliseconds: so does the creation time the
			// deadline counts from.
			created := time.Now().Add(-tc.created).Truncate(time.Millisecond)
			b := e.batch(e.account(false), created, "a@hang.example", "b@hang.example", "c@quick.example")
			if err := r.Enqueue(e.ctx, b); err != nil {
				t.Fatal(err)
			}
			got := e.wait(b, 5*time.Second)
			if got.State != evs.StateCompleted || got.Counters.Processed != 3 || got.Counters.Unknown < 2 {
				t.Fatalf("%s %+v", got.State, got.Counters)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.created != 0 {
				// Past its deadline before the runner saw it: nothing is
				// asked of a server.
				if len(cuts) != 0 || eng.count("a@hang.example")+eng.count("b@hang.example") != 0 {
					t.Fatalf("a batch past its deadline started %d sessions", len(cuts))
				}
			} else {
				// The sessions ran, and only the batch's deadline, not
				// before created+500 ms, stopped them.
				if len(cuts) == 0 {
					t.Fatal("no session of the @hang domain ran")
				}
				for _, c := range cuts {
					if !c.limited || c.err != context.DeadlineExceeded || c.deadline.Before(created.Add(deadline)) {
						t.Fatalf("a session ended by %v with deadline %v (set: %v); want the batch's deadline, %v", c.err, c.deadline, c.limited, created.Add(deadline))
					}
				}
			}
			for _, res := range e.results(b) {
				if strings.Contains(res.Email, "@hang") && (res.Decision.Reason != evs.ReasonTimeout || res.Decision.Checks.SMTP.Detail != batch.DetailDeadline) {
					t.Fatalf("%s: %s %+v", res.Email, res.Decision.Reason, res.Decision.Checks.SMTP)
				}
			}
		})
	}
}

// TestRunnerStoreFault: the store fails in the middle of a batch and for
// a while after; the batch completes once it is back, without a restart,
// with every address counted once.
func TestRunnerStoreFault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fs := &testkit.FaultyStore{EmbeddedStore: e.st}
	var calls atomic.Int64
	eng := &fakeEngine{hold: func(ctx context.Context, emails []string) {
		if calls.Add(1) == 5 {
			fs.Down.Store(true) // the disk fills up mid-batch
		}
	}}
	r := e.runner(fs, eng, batch.Worker{RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond}, batch.LocalConfig{Workers: 2, PerBatch: 2})
	b := e.batch(e.account(false), time.Now(), emails("d", 40)...)
	if err := r.Enqueue(e.ctx, b); err != nil {
		t.Fatal(err)
	}
	// The store refuses five writes, then five more of the retries that
	// follow (10 ms back-offs, growing to 100 ms): the batch must wait them
	// out, not end.
	testkit.Eventually(t, 10*time.Second, testkit.Until(func() bool { return fs.Fails.Load() >= 10 }, "the store refused fewer than 10 calls"))
	if got, _ := e.st.Batch(e.ctx, b.AccountID, b.ID); got.State.Final() {
		t.Fatalf("batch final while the store was down: %s", got.State)
	}
	fs.Down.Store(false)
	got := e.wait(b, 10*time.Second)
	if got.State != evs.StateCompleted || got.Counters.Processed != 40 || got.Counters.Deliverable != 40 {
		t.Fatalf("%s %+v", got.State, got.Counters)
	}
	if n := len(e.results(b)); n != 40 {
		t.Fatalf("%d results, want 40", n)
	}
}

// TestRunnerCancelStopsSessions: a batch cancelled while its sessions hang
// stops them within seconds, not at their time limit, so its slots go
// back; the cancelled batch stays cancelled.
func TestRunnerCancelStopsSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var hanging, stopped atomic.Int64
	eng := &fakeEngine{hold: func(ctx context.Context, emails []string) {
		hanging.Add(1)
		<-ctx.Done()
		stopped.Add(1)
	}}
	r := e.runner(e.st, eng, batch.Worker{}, batch.LocalConfig{})
	b := e.batch(e.account(false), time.Now(), emails("c", 4)...)
	if err := r.Enqueue(e.ctx, b); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, testkit.Until(func() bool { return hanging.Load() == 4 }, "fewer than 4 sessions under way"))
	if _, err := e.st.TransitionBatch(e.ctx, b.AccountID, b.ID, []evs.State{evs.StateRunning}, evs.StateCancelled, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if n := stopped.Load(); n < 4 {
			return fmt.Errorf("%d of 4 sessions stopped after the cancel", n)
		}
		return nil
	})
	if got := e.wait(b, time.Second); got.State != evs.StateCancelled {
		t.Fatalf("%s %+v", got.State, got.Counters)
	}
}

// TestRunnerResume: a runner started on a store with a half-done batch
// verifies only the addresses without a result and completes it with exact
// counters.
func TestRunnerResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acct := e.account(false)
	list := emails("r", 10)
	b := e.batch(acct, time.Now(), list...)
	if _, err := e.st.TransitionBatch(e.ctx, acct, b.ID, []evs.State{evs.StateQueued}, evs.StateRunning, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	done := (&fakeEngine{}).VerifyDomain(e.ctx, list[:4], evs.ModeFull)
	var rs []evs.Result
	for i, d := range done {
		rs = append(rs, evs.Result{Seq: i, Email: list[i], Decision: d})
	}
	if _, err := e.st.PutResults(e.ctx, acct, b.ID, rs, time.Now()); err != nil {
		t.Fatal(err)
	}
	eng := &fakeEngine{}
	e.runner(e.st, eng, batch.Worker{}, batch.LocalConfig{}) // Start resumes it
	got := e.wait(b, 5*time.Second)
	if got.State != evs.StateCompleted || got.Counters.Processed != 10 || got.Counters.Deliverable != 10 {
		t.Fatalf("%s %+v", got.State, got.Counters)
	}
	for i, m := range list {
		want := 1
		if i < 4 {
			want = 0
		}
		if n := eng.count(m); n != want {
			t.Fatalf("%s verified %d times, want %d", m, n, want)
		}
	}
}

// TestEnqueueItemsVerifiesTheGivenItems: a batch handed over with its items
// is verified from them, each once, and completes with every result, as one
// read back from the store would.
func TestEnqueueItemsVerifiesTheGivenItems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	eng := &fakeEngine{}
	r := e.runner(e.st, eng, batch.Worker{}, batch.LocalConfig{})
	list := emails("given", 30)
	b := e.batch(e.account(false), time.Now(), list...)
	items := make([]evs.Item, len(list))
	for i, m := range list {
		items[i] = evs.Item{Seq: i, Email: m, Domain: m[strings.IndexByte(m, '@')+1:]}
	}
	if err := r.EnqueueItems(e.ctx, b, items); err != nil {
		t.Fatal(err)
	}
	got := e.wait(b, 10*time.Second)
	if got.State != evs.StateCompleted || got.Counters.Processed != len(list) {
		t.Fatalf("batch = %s %+v; want completed with %d processed", got.State, got.Counters, len(list))
	}
	rs := e.results(b)
	if len(rs) != len(list) {
		t.Fatalf("%d results; want %d", len(rs), len(list))
	}
	for i, res := range rs {
		if res.Seq != i || res.Email != list[i] || eng.count(list[i]) != 1 {
			t.Errorf("result %d = seq %d %s, verified %d times", i, res.Seq, res.Email, eng.count(list[i]))
		}
	}
}

// TestRunnerWaitsForTheWriter: while the store takes no results, a batch
// verifies only what its slots hold (a message whose write is refused
// keeps its slot and its verdicts, retrying the write) instead of every
// address, so verdicts waiting for the store neither pile up in memory
// nor are asked again; once the store is back, the batch completes with
// every address verified once.
func TestRunnerWaitsForTheWriter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fs := &testkit.FaultyStore{EmbeddedStore: e.st}
	var recovered atomic.Bool
	eng := &fakeEngine{hold: func(ctx context.Context, emails []string) {
		if !recovered.Load() {
			fs.Down.Store(true) // from the first verdict on, nothing is written
		}
	}}
	const perBatch, n = 2, 200
	var faults atomic.Int64
	r := e.runner(fs, eng, batch.Worker{RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, Fault: func(error) { faults.Add(1) }}, batch.LocalConfig{Workers: perBatch, PerBatch: perBatch})
	list := emails("w", n) // one domain each: a message per address
	b := e.batch(e.account(false), time.Now(), list...)
	if err := r.Enqueue(e.ctx, b); err != nil {
		t.Fatal(err)
	}
	// Ten refused writes, most of them the retries (10 ms back-offs,
	// growing to 50 ms) of the messages whose slots wait: room for a
	// message that did not wait to run on.
	testkit.Eventually(t, 10*time.Second, testkit.Until(func() bool { return fs.Fails.Load() >= 10 }, "the store refused fewer than 10 writes"))
	verified := 0
	for _, m := range list {
		verified += eng.count(m)
	}
	if most := perBatch + 1; verified > most {
		t.Fatalf("%d addresses verified while the store took no results, want at most %d", verified, most)
	}
	if faults.Load() == 0 {
		t.Fatal("Fault was told of no refused write")
	}
	recovered.Store(true)
	fs.Down.Store(false)
	// 200 messages, two at a time, each one write: 2 s alone, longer on
	// a loaded machine.
	got := e.wait(b, 30*time.Second)
	if got.State != evs.StateCompleted || got.Counters.Processed != n {
		t.Fatalf("%s %+v", got.State, got.Counters)
	}
	for _, m := range list {
		if c := eng.count(m); c != 1 {
			t.Fatalf("%s verified %d times", m, c)
		}
	}
}

// TestExpire: the one way both deployments end a batch past its deadline.
// Every pending address gets unknown/timeout, the written callback sees
// the batch final, and a batch with nothing left to end is no error.
func TestExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acct := e.account(false)
	list := emails("x", 5)
	b := e.batch(acct, time.Now().Add(-time.Hour), list...)
	if _, err := e.st.TransitionBatch(e.ctx, acct, b.ID, []evs.State{evs.StateQueued}, evs.StateRunning, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	done := (&fakeEngine{}).VerifyDomain(e.ctx, list[:2], evs.ModeFull)
	if _, err := e.st.PutResults(e.ctx, acct, b.ID, []evs.Result{{Seq: 0, Email: list[0], Decision: done[0]}, {Seq: 1, Email: list[1], Decision: done[1]}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var writes []evs.Batch
	if err := batch.Expire(e.ctx, e.st, b, false, time.Now, 2, func(got evs.Batch) { writes = append(writes, got) }); err != nil {
		t.Fatal(err)
	}
	// Three pending addresses in chunks of two: two writes, the last final.
	if len(writes) != 2 || writes[0].State.Final() || writes[1].State != evs.StateCompleted || writes[1].Counters.Unknown != 3 || writes[1].Counters.Deliverable != 2 {
		t.Fatalf("writes %+v", writes)
	}
	for _, res := range e.results(b)[2:] {
		if res.Decision.Reason != evs.ReasonTimeout || res.Decision.Checks.SMTP.Detail != batch.DetailDeadline {
			t.Fatalf("%s: %s %q", res.Email, res.Decision.Reason, res.Decision.Checks.SMTP.Detail)
		}
	}
	// Again, with nothing pending: one empty write, which changes nothing.
	writes = nil
	err := batch.Expire(e.ctx, e.st, writesDone(e, b), false, time.Now, 2, func(got evs.Batch) { writes = append(writes, got) })
	if err != nil || len(writes) != 1 || writes[0].State != evs.StateCompleted {
		t.Fatalf("expire of a completed batch: %v, writes %+v", err, writes)
	}
	if got, _ := e.st.Batch(e.ctx, acct, b.ID); got.State != evs.StateCompleted || got.Counters.Processed != 5 {
		t.Fatalf("%s %+v", got.State, got.Counters)
	}
}

// writesDone reads b as the store has it now.
func writesDone(e *env, b evs.Batch) evs.Batch {
	got, err := e.st.Batch(e.ctx, b.AccountID, b.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}
