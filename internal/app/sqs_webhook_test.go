package app_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/webhook"
)

// TestWorkerWebhookRetryDelays: on SQS, the message that completes a
// batch queues its webhook; each failed attempt queues the next look with
// the retry delay (1 s for a test-mode account) until the receiver
// answers 200, and then nothing more is queued. That the event arrives,
// signed, once per attempt with one webhook-id, and the delivery the
// envelope shows, is the behaviour suite's (TestSuiteWebhook).
func TestWorkerWebhookRetryDelays(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		calls int
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer rc.Close()
	w := newWorld(t, 200, time.Minute, 3)
	loop, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	w.w.Webhooks = &webhook.Deliverer{Store: w.st, Client: webhook.NewClient(loop), Body: api.EventBody}

	b, items := newCallbackBatch(w, rc.URL+"/in")
	if err := w.q.Enqueue(w.ctx, b); err != nil {
		t.Fatal(err)
	}
	w.handle(w.receiveN(1, 10*time.Second)...) // plan
	w.rec.take()
	w.handle(w.receiveN(1, 10*time.Second)...) // the one work message
	if got := w.current(); got.State != evs.StateCompleted || got.Counters.Processed != len(items) {
		t.Fatalf("batch after work: %+v", got)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		sent := w.rec.take()
		if len(sent) != 1 || sent[0].msg.Kind != batch.KindWebhook || sent[0].msg.BatchID != b.ID {
			t.Fatalf("before attempt %d the queue got %+v, want one webhook message", attempt, sent)
		}
		if want := int32(0); attempt > 1 {
			want = 1
			if sent[0].delay != want {
				t.Fatalf("retry %d delayed %d s, want %d", attempt, sent[0].delay, want)
			}
		} else if sent[0].delay != want {
			t.Fatalf("first attempt delayed %d s", sent[0].delay)
		}
		w.handle(w.receiveN(1, 10*time.Second)...)
	}
	if sent := w.rec.take(); len(sent) != 0 {
		t.Fatalf("after delivery the queue got %+v", sent)
	}
	w.assertEmpty()
}

func newCallbackBatch(w *world, url string) (evs.Batch, []evs.Item) {
	w.t.Helper()
	now := time.Now().UTC()
	items := []evs.Item{{Seq: 0, Email: "accepted_email@x.example", Domain: "x.example"}}
	b := evs.Batch{ID: "b-" + now.Format("150405.000000000"), AccountID: w.acct.ID, Mode: evs.ModeQuick, State: evs.StateQueued,
		CreatedAt: now, ExpiresAt: now.Add(time.Hour), Counters: evs.Counters{Total: 1}, CallbackURL: url}
	if err := w.st.CreateBatch(w.ctx, b, items); err != nil {
		w.t.Fatal(err)
	}
	w.batch = b
	return b, items
}

// blackHole is a loopback listener that accepts connections and never
// answers; it counts the connections it accepted, and those the client
// closed (an attempt that gave up).
func blackHole(t *testing.T) (url string, accepted, closed *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted, closed = &atomic.Int64{}, &atomic.Int64{}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				_, _ = io.Copy(io.Discard, c) // until the client gives up
				closed.Add(1)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String() + "/hook", accepted, closed
}

// TestWorkerWebhookFairAcrossAccounts: one SQS event carries six webhook
// messages of an account whose receiver never answers, then one of another
// account. The other account's attempt is made at once, not after the
// hog's 10 s timeouts (none of the hog's attempts has given up when it
// arrives); the hog makes only its per-account number of attempts at
// once, and its other messages go back to the queue for a short wait
// instead of holding the invocation.
//
// Not parallel: the delays it reads are measured against its receivers'
// 10 s timeouts, and under the other tests' load two came back 0.
func TestWorkerWebhookFairAcrossAccounts(t *testing.T) {
	hole, accepted, closed := blackHole(t)
	arrived := make(chan int64, 1) // the hog's attempts given up by then
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- closed.Load():
		default:
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer rc.Close()
	w := newWorld(t, 200, time.Minute, 3)
	loop, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	w.w.Webhooks = &webhook.Deliverer{Store: w.st, Client: webhook.NewClient(loop), Body: api.EventBody}
	w.w.WebhookSlots, w.w.WebhookPerAccount = w.st, 2

	final := func(b evs.Batch) {
		t.Helper()
		if _, err := w.st.TransitionBatch(w.ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateCancelled, "", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	var ev events.SQSEvent
	add := func(b evs.Batch) {
		body, _ := json.Marshal(batch.Message{Kind: batch.KindWebhook, AccountID: b.AccountID, BatchID: b.ID})
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: b.ID, Body: string(body), EventSource: "aws:sqs"})
	}
	for range 6 {
		b, _ := newCallbackBatch(w, hole)
		final(b)
		add(b)
	}
	other := evs.Account{ID: "acct-other-" + w.acct.ID, Name: w.acct.Name + "-other", Test: true, CreatedAt: time.Now().UTC()}
	if err := w.st.CreateAccount(w.ctx, other); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	ob := evs.Batch{ID: "other-" + now.Format("150405.000000000"), AccountID: other.ID, Mode: evs.ModeQuick, State: evs.StateQueued,
		CreatedAt: now, ExpiresAt: now.Add(time.Hour), Counters: evs.Counters{Total: 1}, CallbackURL: rc.URL + "/in"}
	if err := w.st.CreateBatch(w.ctx, ob, []evs.Item{{Seq: 0, Email: "accepted_email@x.example", Domain: "x.example"}}); err != nil {
		t.Fatal(err)
	}
	final(ob)
	add(ob)

	resp, err := app.SQSHandler(w.w)(w.ctx, ev)
	if err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("Handle: %v, failures %+v\nlogs: %s", err, resp.BatchItemFailures, w.logs.String())
	}
	select {
	case gaveUp := <-arrived:
		if gaveUp != 0 {
			t.Errorf("the other account's attempt came after %d of the hog's attempts had timed out, want before any", gaveUp)
		}
	default:
		t.Fatal("the other account's attempt was never made")
	}
	if n := accepted.Load(); n < 1 || n > 2 {
		t.Errorf("the hog made %d attempts at once, want 1 or 2 (its per-account bound)", n)
	}
	busy, retries := 0, 0
	for _, s := range w.rec.take() {
		switch {
		case s.msg.Kind != batch.KindWebhook || s.msg.AccountID != w.acct.ID:
			t.Errorf("queued %+v", s)
		case s.delay == 2:
			busy++ // over the bound: looked at again shortly
		case s.delay == 1:
			retries++ // attempted: the test-mode retry delay
		default:
			t.Errorf("queued with delay %d: %+v", s.delay, s)
		}
	}
	if int64(retries) != accepted.Load() || busy+retries != 6 {
		t.Errorf("%d hog messages back for the bound and %d retries after %d attempts, want 6 in all", busy, retries, accepted.Load())
	}
}
