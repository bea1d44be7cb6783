package app_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// sharedHost is a live account's world whose domains d0…d(domains-1) all
// send their mail to one loopback MTA, which accepts user* recipients
// (and refuses the accept-all probe) after delay per reply.
type sharedHost struct {
	peer     *testkit.SMTPServer
	res      *dnscheck.Resolver
	loopback *config.EgressPolicy
	emails   []string
}

func newSharedHost(t *testing.T, w *world, delay time.Duration, domains, users int) sharedHost {
	t.Helper()
	return newSharedHostRcpt(t, w, delay, domains, users, func(a string) string {
		if strings.HasPrefix(a, "user") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 no such user" // the accept-all probe
	})
}

// newSharedHostRcpt is newSharedHost whose MTA answers RCPT TO:<a> with
// rcpt(a).
func newSharedHostRcpt(t *testing.T, w *world, delay time.Duration, domains, users int, rcpt func(a string) string) sharedHost {
	t.Helper()
	h := sharedHost{peer: testkit.StartSMTP(t, testkit.SMTPOptions{Delay: delay, Rcpt: rcpt})}
	dns := testkit.StartDNS(t)
	dns.AddRecord("mx.shared.example. 300 IN A 127.0.0.1")
	for d := range domains {
		dns.AddRecord(fmt.Sprintf("d%d.example. 300 IN MX 10 mx.shared.example.", d))
		for i := range users {
			h.emails = append(h.emails, fmt.Sprintf("user%d@d%d.example", i, d))
		}
	}
	var err error
	if h.res, err = dnscheck.New(dnscheck.Config{Servers: []string{dns.Addr}, Timeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if h.loopback, err = config.ParseEgress("127.0.0.0/8"); err != nil { // the shared host
		t.Fatal(err)
	}
	live := evs.Account{ID: "acct-" + uuid.NewString(), Name: testkit.UniqueName(t, "live"), CreatedAt: time.Now().UTC()}
	if err := w.st.CreateAccount(w.ctx, live); err != nil {
		t.Fatal(err)
	}
	w.acct = live
	return h
}

// engine is a live engine, with its own prober, on the shared host.
func (h sharedHost) engine(t *testing.T, perHost int) *verify.Engine {
	t.Helper()
	p, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: h.peer.Port, Resolver: h.res, Egress: h.loopback, PerHostLimit: perHost, ReplyTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := verify.New(verify.Config{Resolver: h.res, Prober: verify.SMTP(p)})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// TestWorkerHostLeasesAcrossInvocations: several worker invocations run at
// once, each its own process as far as SMTP goes (its own prober, with its
// own in-process per-host limit of 4), on the same queue and store. Every
// domain's mail goes to one host, of one provider (shared.example). With
// DynamoDB session slots (2 per provider) the host never sees more than 2
// sessions at once; without them it sees more, which shows the test can
// tell. Groups that find no slot are parked and started as sessions end.
//
// Not parallel with other tests: work parked for a provider is woken at
// its time, and under their load that time can pass before it is parked;
// the tests that park run alone. Its two runs go at once: they mostly
// wait on their own peers' replies.
func TestWorkerHostLeasesAcrossInvocations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leases bool
	}{{"with leases", true}, {"without leases", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const slots, invocations, domains = 2, 4, 8
			w := newWorld(t, 3, time.Second, 3)
			h := newSharedHost(t, w, 60*time.Millisecond, domains, 3)
			peer, emails := h.peer, h.emails
			b := w.createBatch(evs.ModeFull, emails...)
			if err := w.q.Enqueue(w.ctx, b); err != nil {
				t.Fatal(err)
			}

			var diag testkit.LogBuffer // shown if the test fails
			defer func() {
				if t.Failed() {
					t.Logf("worker logs:\n%s", diag.String())
				}
			}()
			// Each invocation: its own engine and prober, the shared store.
			workers := make([]*batch.Worker, invocations)
			for i := range workers {
				eng := h.engine(t, 4)
				workers[i] = &batch.Worker{
					Queue: w.q, Store: w.st, Accounts: w.st,
					Processor: &batch.Processor{Engine: eng, Sandbox: verify.NewSandbox(nil)},
					Logger:    slog.New(slog.NewTextHandler(&diag, &slog.HandlerOptions{Level: slog.LevelDebug})),
					PackSize:  3, Concurrency: 4,
				}
				if tc.leases {
					workers[i].Polite = &batch.Polite{Parking: w.st, Gate: &politeness.Gate{State: w.st, MX: eng,
						Limits: politeness.Limits{Sessions: map[string]int{"*": slots}, RcptPerMin: map[string]int{"*": 1000}}}}
				}
			}
			ctx, cancel := context.WithTimeout(w.ctx, 60*time.Second)
			defer cancel()
			var (
				wg     sync.WaitGroup
				stamps stampSet
			)
			for _, wk := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						cur, err := w.st.Batch(ctx, b.AccountID, b.ID)
						if err == nil && cur.State.Final() {
							return
						}
						out, err := w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.url), MaxNumberOfMessages: 2, WaitTimeSeconds: 1,
							MessageAttributeNames: []string{sendStamp}})
						if err != nil || len(out.Messages) == 0 {
							continue
						}
						fresh := stamps.fresh(out.Messages)
						if len(fresh) == 0 {
							for _, m := range out.Messages {
								_, _ = w.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.url), ReceiptHandle: m.ReceiptHandle})
							}
							continue
						}
						resp, err := app.SQSHandler(wk)(ctx, event(fresh...))
						if err != nil || len(resp.BatchItemFailures) > 0 {
							t.Errorf("Handle: %v %+v", err, resp.BatchItemFailures)
							return
						}
						for _, m := range out.Messages {
							_, _ = w.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.url), ReceiptHandle: m.ReceiptHandle})
						}
					}
				}()
			}
			wg.Wait()
			final := w.current()
			if final.State != evs.StateCompleted || final.Counters.Deliverable != len(emails) {
				t.Fatalf("batch %s %+v", final.State, final.Counters)
			}
			got := peer.MaxConcurrent()
			t.Logf("most sessions at once on the shared host: %d", got)
			if tc.leases && got > slots {
				t.Fatalf("%d sessions at once with %d leases per host", got, slots)
			}
			if !tc.leases && got <= slots {
				t.Fatalf("only %d sessions at once without leases: the test cannot tell", got)
			}
		})
	}
}

// TestWorkerPlanWindow: a large batch is planned a window at a time, and
// the next window only once half of the last one is done, so its messages
// never fill the queue ahead of other batches'.
func TestWorkerPlanWindow(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 3, time.Second, 3)
	w.w.PlanWindow = 6
	var emails []string
	for i := range 20 {
		emails = append(emails, fmt.Sprintf("u%d+accepted_email@d%d.example", i, i))
	}
	b := w.createBatch(evs.ModeQuick, emails...)
	if err := w.q.Enqueue(w.ctx, b); err != nil {
		t.Fatal(err)
	}
	w.handle(w.receiveN(1, 10*time.Second)...)
	sent := w.rec.take()
	kinds := func(es []sentEntry) (work, items int, plan *sentEntry) {
		for i, e := range es {
			switch e.msg.Kind {
			case batch.KindWork:
				work++
				items += len(e.msg.Items)
			case batch.KindPlan:
				plan = &es[i]
			}
		}
		return
	}
	work, items, plan := kinds(sent)
	if work != 2 || items != 6 || plan == nil || plan.msg.From != 6 || plan.delay != 0 {
		t.Fatalf("first window: %d work messages, %d items, plan %+v", work, items, plan)
	}
	msgs := w.receiveN(3, 10*time.Second)
	var works, plans = msgs[:0:0], msgs[:0:0]
	for _, m := range msgs {
		if decode(t, m).Kind == batch.KindPlan {
			plans = append(plans, m)
		} else {
			works = append(works, m)
		}
	}
	// The next plan, before any work is done, waits.
	w.handle(plans...)
	if _, n, p := kinds(w.rec.take()); n != 0 || p == nil || p.delay == 0 || p.msg.From != 6 {
		t.Fatalf("plan with its window undone: %d items planned, resent %+v", n, p)
	}
	// Once the window is done, the next is planned.
	w.handle(works...)
	if cur := w.current(); cur.Counters.Processed != 6 {
		t.Fatalf("after the first window: %+v", cur.Counters)
	}
	w.handle(w.receiveN(1, 10*time.Second)...)
	if work, items, plan := kinds(w.rec.take()); work != 2 || items != 6 || plan == nil || plan.msg.From != 12 {
		t.Fatalf("second window: %d work messages, %d items, plan %+v", work, items, plan)
	}
}

// TestWorkerDeadline: on AWS too, a batch past EVS_BATCH_DEADLINE
// completes with its pending addresses unknown/timeout, whether its plan
// or its work message finds it so.
func TestWorkerDeadline(t *testing.T) {
	t.Parallel()
	for _, at := range []string{"plan", "work"} {
		t.Run(at, func(t *testing.T) {
			w := newWorld(t, 200, time.Second, 3)
			b := w.createBatch(evs.ModeFull, "accepted_email@x.example", "rejected_email@y.example")
			if err := w.q.Enqueue(w.ctx, b); err != nil {
				t.Fatal(err)
			}
			if at == "work" {
				w.handle(w.receiveN(1, 10*time.Second)...)
			}
			w.w.Deadline = time.Nanosecond
			w.handle(w.receiveN(1, 10*time.Second)...)
			if cur := w.current(); cur.State != evs.StateCompleted {
				t.Fatalf("state %s %+v", cur.State, cur.Counters)
			}
			w.checkCounters(evs.Counters{Total: 2, Processed: 2, Unknown: 2})
			rs, err := w.st.Results(w.ctx, b.AccountID, b.ID, -1, 10, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.Decision.Reason != evs.ReasonTimeout || r.Decision.Checks.SMTP.Detail != batch.DetailDeadline || !r.Decision.TestMode {
					t.Fatalf("%+v", r.Decision)
				}
			}
			w.assertEmpty()
		})
	}
}

// TestWorkerBudgetProbesOnce: an invocation whose deadline comes mid-message
// starts no session in its last Reserve, writes what it finished and puts
// the rest back on the queue; another invocation takes the rest; then SQS
// redelivers the first message (as it does when an invocation's end is
// lost) while the batch's other message is still pending. Across all of
// it, the loopback MTA is asked about every address exactly once, with
// the account result cache as without it (the redelivery reads it again).
//
// Not parallel with other tests: its invocation is cut at 6 s, which
// their load must not eat into. Its two runs go at once: each waits on
// its own peer's 200 ms replies, and neither loads the other.
func TestWorkerBudgetProbesOnce(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) {
			t.Parallel()
			budgetProbesOnce(t, cached)
		})
	}
}

func budgetProbesOnce(t *testing.T, cached bool) {
	const domains, users = 9, 2
	w := newWorld(t, 16, time.Second, 3) // work messages: d0-d7, then d8
	h := newSharedHost(t, w, 200*time.Millisecond, domains, users)
	peer, emails, eng := h.peer, h.emails, h.engine(t, 0)
	b := w.createBatch(evs.ModeFull, emails...)
	w.w.Processor = &batch.Processor{Engine: eng, Sandbox: verify.NewSandbox(nil)}
	w.w.Concurrency = 2
	if cached {
		w.w.Cache = &cache.Cache{Store: w.st, TTL: time.Hour, Now: time.Now}
	}
	if err := w.q.Enqueue(w.ctx, b); err != nil {
		t.Fatal(err)
	}
	w.handle(w.receiveN(1, 10*time.Second)...) // the plan
	work := w.receiveN(2, 10*time.Second)
	first, second := work[:1], work[1:]
	half := len(decode(t, first[0]).Items)

	// A 6 s invocation that stops starting sessions after 3 s: a session
	// here takes about 1.4 s and two run at once, so the first domains are
	// done and the last are not, and those under way have 3 s to finish.
	w.w.Reserve = 3 * time.Second
	ctx, cancel := context.WithTimeout(w.ctx, 6*time.Second)
	resp, err := app.SQSHandler(w.w)(ctx, event(first...))
	cancel()
	if err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("first invocation: %v %+v\n%s", err, resp.BatchItemFailures, w.logs.String())
	}
	done := w.current().Counters.Processed
	if done == 0 || done == half {
		t.Fatalf("the first invocation finished %d of its %d addresses: the test cannot tell", done, half)
	}
	w.w.Reserve = 0
	for w.current().Counters.Processed < half {
		w.handle(w.receive(10, 2)...) // what it put back
	}
	// The first message again, as a redelivery, while the second waits.
	redo := event(first...)
	redo.Records[0].Attributes = map[string]string{"ApproximateReceiveCount": "2"}
	if resp, err := app.SQSHandler(w.w)(w.ctx, redo); err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("redelivery: %v %+v", err, resp.BatchItemFailures)
	}
	w.handle(second...)
	asked := map[string]int{}
	for _, c := range peer.Commands() {
		if a, ok := strings.CutPrefix(c, "RCPT TO:<user"); ok {
			asked[strings.TrimSuffix(a, ">")]++
		}
	}
	for _, e := range emails {
		if n := asked[strings.TrimPrefix(e, "user")]; n != 1 {
			t.Errorf("%s asked %d times, want once", e, n)
		}
	}
	if cur := w.current(); cur.State != evs.StateCompleted || cur.Counters.Deliverable != len(emails) {
		t.Fatalf("batch %s %+v", cur.State, cur.Counters)
	}
	t.Logf("first invocation: %d of %d addresses; every address asked once", done, half)
}

// countingSandbox answers like the sandbox, counts the addresses it is
// asked about, and does not answer for stuck.example until release is
// closed (the worker verifies under a context of its own, which the test
// cannot cancel).
type countingSandbox struct {
	mu      sync.Mutex
	asked   map[string]int
	inner   *verify.Sandbox
	release chan struct{}
}

func (c *countingSandbox) VerifyDomain(ctx context.Context, emails []string, mode evs.Mode) []evs.Decision {
	c.mu.Lock()
	for _, e := range emails {
		c.asked[e]++
	}
	c.mu.Unlock()
	if strings.HasSuffix(emails[0], "@stuck.example") {
		<-c.release
	}
	return c.inner.VerifyDomain(ctx, emails, mode)
}

// deadStore stands for a worker process that died: once dead, it writes
// nothing more.
type deadStore struct {
	batch.Store
	dead atomic.Bool
}

func (d *deadStore) PutResults(ctx context.Context, accountID, id string, rs []evs.Result, now time.Time) (evs.Batch, error) {
	if d.dead.Load() {
		return evs.Batch{}, errors.New("the process is gone")
	}
	return d.Store.PutResults(ctx, accountID, id, rs, now)
}

// TestWorkerCrashKeepsFinishedResults: a worker that dies mid-message (out
// of memory, a crash: no deadline to see coming) has already written the
// results of its first finished transaction's worth of addresses, so the
// redelivered message asks about only the rest.
func TestWorkerCrashKeepsFinishedResults(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 500, time.Second, 3)
	var emails []string
	for i := range 150 {
		emails = append(emails, fmt.Sprintf("accepted_email+%d@d%d.example", i, i))
	}
	emails = append(emails, "accepted_email@stuck.example")
	b := w.createBatch(evs.ModeQuick, emails...)
	counter := &countingSandbox{asked: map[string]int{}, inner: verify.NewSandbox(nil), release: make(chan struct{})}
	dead := &deadStore{Store: w.st}
	w.w.Processor = &batch.Processor{Engine: noNetwork{t}, Sandbox: counter}
	w.w.Store = dead
	if err := w.q.Enqueue(w.ctx, b); err != nil {
		t.Fatal(err)
	}
	w.handle(w.receiveN(1, 10*time.Second)...) // the plan
	work := w.receiveN(1, 10*time.Second)

	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		app.SQSHandler(w.w)(ctx, event(work...))
	}()
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { cancel(); close(counter.release) }) }
	t.Cleanup(stop)
	testkit.Eventually(t, 20*time.Second, func() error {
		if n := w.current().Counters.Processed; n < 99 {
			return fmt.Errorf("no results written while the message runs: processed %d", n)
		}
		return nil
	})
	dead.dead.Store(true) // the process dies here
	stop()
	<-done
	written := w.current().Counters.Processed

	// SQS redelivers the message to a live worker.
	w.w.Store = w.st
	redo := event(work...)
	redo.Records[0].Attributes = map[string]string{"ApproximateReceiveCount": "2"}
	counter.inner = verify.NewSandbox(nil)
	if resp, err := app.SQSHandler(w.w)(w.ctx, redo); err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("redelivery: %v %+v", err, resp.BatchItemFailures)
	}
	twice := 0
	for _, e := range emails {
		if counter.asked[e] > 1 {
			twice++
		}
	}
	if cur := w.current(); cur.Counters.Processed != len(emails) || cur.State != evs.StateCompleted {
		t.Fatalf("after the redelivery: %s %+v", cur.State, cur.Counters)
	}
	if want := len(emails) - written; twice != want {
		t.Fatalf("%d addresses asked twice; %d were written before the crash, so want %d", twice, written, want)
	}
	t.Logf("crash after %d of %d results: %d addresses asked again", written, len(emails), twice)
}

// TestWorkerRunsAnEventsMessagesAtOnce: the messages of one SQS event run
// side by side, not one after another: two work messages, one slow domain
// each and one group at a time per message, keep two sessions open at the
// receiving server at once. One after another, a slow receiver held every
// message behind it.
//
// Not parallel: the two sessions must meet within 4 s, which the other
// tests' load must not eat into.
func TestWorkerRunsAnEventsMessagesAtOnce(t *testing.T) {
	w := newWorld(t, 2, time.Second, 3) // a work message per domain of 2
	var open, most atomic.Int32
	// A RCPT is answered once two are in flight at once: the messages'
	// sessions meet. Run one after another, the first waits 4 s for a
	// second in vain (less than the prober's 5 s reply timeout), and most
	// stays 1.
	met := make(chan struct{})
	var meetOnce sync.Once
	h := newSharedHostRcpt(t, w, 0, 2, 2, func(a string) string {
		n := open.Add(1)
		defer open.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n >= 2 {
			meetOnce.Do(func() { close(met) })
		}
		select {
		case <-met:
		case <-time.After(4 * time.Second):
		}
		if strings.HasPrefix(a, "user") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 no such user"
	})
	w.w.Processor = &batch.Processor{Engine: h.engine(t, 0), Sandbox: verify.NewSandbox(nil)}
	w.w.Concurrency = 1
	b := w.createBatch(evs.ModeFull, h.emails...)
	if err := w.q.Enqueue(w.ctx, b); err != nil {
		t.Fatal(err)
	}
	w.handle(w.receiveN(1, 10*time.Second)...) // the plan
	work := w.receiveN(2, 10*time.Second)
	if resp, err := app.SQSHandler(w.w)(w.ctx, event(work...)); err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("invocation: %v %+v\n%s", err, resp.BatchItemFailures, w.logs.String())
	}
	if got := w.current(); got.Counters.Deliverable != len(h.emails) {
		t.Fatalf("counters %+v, want %d deliverable", got.Counters, len(h.emails))
	}
	if most.Load() < 2 {
		t.Fatalf("at most %d RCPT in flight at once: the event's two messages ran one after another", most.Load())
	}
}
