package sqsqueue_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/egress"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqsqueue"
	"github.com/evs-dev/evs/internal/webhook"
)

// TestWorkerWebhook: the message that completes a batch queues its webhook;
// each failed attempt queues the next look with the retry delay (1 s for a
// test-mode account) until the receiver answers 200, and then nothing more
// is queued.
func TestWorkerWebhook(t *testing.T) {
	var (
		mu    sync.Mutex
		calls int
		ids   = map[string]bool{}
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		ids[r.Header.Get("webhook-id")] = true
		if calls <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer rc.Close()
	w := newWorld(t, 200, time.Minute, 3)
	loop, err := egress.Parse("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	w.w.Webhooks = &webhook.Deliverer{Store: w.st, Client: webhook.NewClient(loop)}

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
		if len(sent) != 1 || sent[0].msg.Kind != sqsqueue.KindWebhook || sent[0].msg.BatchID != b.ID {
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
	d, err := w.st.Delivery(w.ctx, b.AccountID, b.ID)
	if err != nil || d.State != evs.CallbackDelivered || d.Attempts != 3 || d.LastStatus != 200 {
		t.Fatalf("delivery %+v %v", d, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 || len(ids) != 1 {
		t.Fatalf("%d calls with %d webhook-ids, want 3 with 1", calls, len(ids))
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
