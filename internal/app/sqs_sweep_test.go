package app_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/webhook"
)

// sweepBody is the constant input of the EventBridge rule (template.yaml).
const sweepBody = `{"kind":"sweep"}`

// clock is the worker's time, moved by the tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// sweepWorld is a world whose worker sweeps, on a clock the test moves.
func sweepWorld(t *testing.T, packSize int) (*world, *clock) {
	w := newWorld(t, packSize, time.Minute, 3)
	c := &clock{t: time.Now()}
	w.w.Now = c.now
	w.w.Sweeper = w.st
	w.w.StallAfter = 30 * time.Minute
	w.w.DeliveryGrace = 10 * time.Minute
	return w, c
}

// sweep puts a sweep message on the queue as EventBridge does, receives it
// and has the worker handle it; it returns what the worker queued.
func (w *world) sweep() []sentEntry {
	w.t.Helper()
	w.rec.take()
	if _, err := w.sqs.SendMessage(w.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(w.url), MessageBody: aws.String(sweepBody)}); err != nil {
		w.t.Fatalf("send sweep: %v", err)
	}
	var ms []types.Message
	for deadline := time.Now().Add(lostReceiveWait); len(ms) == 0 && time.Now().Before(deadline); {
		ms = w.receive(10, 1)
	}
	if len(ms) == 0 {
		w.t.Fatal("the sweep message never arrived")
	}
	// The SDK may resend a message whose reply it lost, so there can be
	// two sweeps, which must be harmless; anything else was left by the
	// test.
	for _, m := range ms {
		if got := decode(w.t, m); got.Kind != batch.KindSweep {
			w.t.Fatalf("the queue holds %+v besides the sweep", got)
		}
	}
	w.handle(ms...)
	return w.rec.take()
}

// drain handles every queued message until the queue is empty.
func (w *world) drain() {
	w.t.Helper()
	for range 50 {
		ms := w.receive(10, 1)
		if len(ms) == 0 {
			return
		}
		w.handle(ms...)
	}
	w.t.Fatal("the queue never drained")
}

func kinds(sent []sentEntry) []string {
	var out []string
	for _, e := range sent {
		out = append(out, e.msg.Kind+":"+e.msg.BatchID)
	}
	return out
}

// TestSweepReplansLostBatch: a batch whose plan message is lost (as when
// every message of a batch dead-letters) is planned again by the first
// sweep that finds it without progress for StallAfter, once per window,
// and then completes with every result counted once.
func TestSweepReplansLostBatch(t *testing.T) {
	t.Parallel()
	w, c := sweepWorld(t, 200)
	b := w.createBatch("quick", mixed...)
	if err := w.q.Enqueue(w.ctx, b); err != nil {
		t.Fatal(err)
	}
	w.receiveN(1, 10*time.Second) // the plan, dropped: the dead-letter queue has it

	if sent := w.sweep(); len(sent) != 0 {
		t.Fatalf("first sweep queued %v; it only notes the batch", kinds(sent))
	}
	c.add(29 * time.Minute)
	if sent := w.sweep(); len(sent) != 0 {
		t.Fatalf("sweep within the stall window queued %v", kinds(sent))
	}
	c.add(2 * time.Minute)
	sent := w.sweep()
	if len(sent) != 1 || sent[0].msg.Kind != batch.KindPlan || sent[0].msg.BatchID != b.ID || sent[0].msg.From != 0 {
		t.Fatalf("stalled batch: sweep queued %v, want one plan", kinds(sent))
	}
	plan := w.receiveN(1, 10*time.Second)
	// A second sweep in the same window (a concurrent or redelivered one)
	// does not plan it again.
	if sent := w.sweep(); len(sent) != 0 {
		t.Fatalf("second sweep of the window queued %v", kinds(sent))
	}
	w.handle(plan...)
	w.drain()
	if got := w.current(); got.State != evs.StateCompleted {
		t.Fatalf("batch after the re-plan: %s", got.State)
	}
	if got := w.results(); len(got) != len(mixedResults) {
		t.Fatalf("results %v", got)
	}
	w.checkCounters(mixedCounters)
	c.add(time.Hour)
	if sent := w.sweep(); len(sent) != 0 {
		t.Fatalf("sweep of a completed batch queued %v", kinds(sent))
	}
	w.assertEmpty()
}

// TestSweepLeavesProgressingBatch: a batch whose results keep coming is
// not planned again, however long it runs; once it stops moving it is, and
// the work of the live messages and of the re-plan overlapping counts every
// address once.
func TestSweepLeavesProgressingBatch(t *testing.T) {
	t.Parallel()
	w, c := sweepWorld(t, 1) // one address per work message
	b := w.createBatch("quick", mixed...)
	if err := w.q.Enqueue(w.ctx, b); err != nil {
		t.Fatal(err)
	}
	w.handle(w.receiveN(1, 10*time.Second)...) // plan: six work messages
	work := w.receiveN(6, 10*time.Second)
	if sent := w.sweep(); len(sent) != 0 {
		t.Fatalf("first sweep queued %v", kinds(sent))
	}
	for i := range 2 {
		c.add(31 * time.Minute)
		w.handle(work[i]) // a result since the last sweep
		if sent := w.sweep(); len(sent) != 0 {
			t.Fatalf("sweep %d of a progressing batch queued %v", i+2, kinds(sent))
		}
	}
	if got := w.current().Counters.Processed; got != 2 {
		t.Fatalf("processed %d, want 2", got)
	}
	// No progress for a window: planned again while four live work
	// messages are still to come.
	c.add(31 * time.Minute)
	sent := w.sweep()
	if len(sent) != 1 || sent[0].msg.Kind != batch.KindPlan {
		t.Fatalf("stalled batch: sweep queued %v, want one plan", kinds(sent))
	}
	w.handle(w.receiveN(1, 10*time.Second)...) // the plan: four work messages
	again := w.receiveN(4, 10*time.Second)
	w.handle(again[:2]...)
	w.handle(work[2:]...) // two of them already written by the re-plan
	if got := w.current(); got.State != evs.StateCompleted {
		t.Fatalf("batch state %s after every address had a result", got.State)
	}
	w.handle(again[2:]...) // for a completed batch: nothing to do
	if got := w.current(); got.State != evs.StateCompleted {
		t.Fatalf("batch state %s", got.State)
	}
	w.checkCounters(mixedCounters)
	w.assertEmpty()
}

// TestSweepFinishesPastDeadline: a batch whose messages are gone and whose
// deadline passed is finished by the sweep, its remaining addresses
// unknown/timeout.
func TestSweepFinishesPastDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		started bool // planned, so running, before its messages were lost
	}{{"queued", false}, {"running", true}} {
		t.Run(tc.name, func(t *testing.T) {
			w, c := sweepWorld(t, 200)
			w.w.Deadline = time.Hour
			b := w.createBatch("quick", mixed...)
			if err := w.q.Enqueue(w.ctx, b); err != nil {
				t.Fatal(err)
			}
			plan := w.receiveN(1, 10*time.Second)
			if tc.started {
				w.handle(plan...)
				w.receiveN(1, 10*time.Second) // the work message, lost
			}
			c.add(59 * time.Minute)
			w.sweep()
			if got := w.current(); got.State.Final() || got.Counters.Processed != 0 {
				t.Fatalf("before the deadline: %s %+v", got.State, got.Counters)
			}
			c.add(2 * time.Minute)
			if sent := w.sweep(); len(sent) != 0 {
				t.Fatalf("sweep past the deadline queued %v", kinds(sent))
			}
			if got := w.current(); got.State != evs.StateCompleted {
				t.Fatalf("past the deadline: %s", got.State)
			}
			for email, r := range w.results() {
				if r != "unknown/timeout" {
					t.Errorf("%s: %s, want unknown/timeout", email, r)
				}
			}
			w.checkCounters(evs.Counters{Total: 7, Duplicates: 1, Processed: 6, Unknown: 6})
			w.assertEmpty()
		})
	}
}

// TestSweepQueuesOverdueDelivery: a batch that became final with no
// message to deliver its event (it failed at creation with the queue
// down, or its cancel's message could not be sent) gets its webhook
// message from the first sweep past the grace, and the receiver gets the
// signed event.
func TestSweepQueuesOverdueDelivery(t *testing.T) {
	t.Parallel()
	for _, final := range []evs.State{evs.StateFailed, evs.StateCancelled} {
		t.Run(string(final), func(t *testing.T) {
			type call struct {
				id, ts, sig string
				body        []byte
			}
			var (
				mu    sync.Mutex
				calls []call
			)
			rc := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, call{r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body})
				rw.WriteHeader(http.StatusNoContent)
			}))
			defer rc.Close()
			w, c := sweepWorld(t, 200)
			loop, err := config.ParseEgress("127.0.0.0/8")
			if err != nil {
				t.Fatal(err)
			}
			w.w.Webhooks = &webhook.Deliverer{Store: w.st, Client: webhook.NewClient(loop), Body: api.EventBody}
			b, _ := newCallbackBatch(w, rc.URL+"/hook")
			errMsg := ""
			if final == evs.StateFailed {
				errMsg = "The work queue is unavailable."
			}
			if _, err := w.st.TransitionBatch(w.ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, final, errMsg, c.now()); err != nil {
				t.Fatal(err)
			}
			c.add(5 * time.Minute)
			if sent := w.sweep(); len(sent) != 0 {
				t.Fatalf("sweep within the grace queued %v", kinds(sent))
			}
			c.add(6 * time.Minute)
			sent := w.sweep()
			if len(sent) != 1 || sent[0].msg.Kind != batch.KindWebhook || sent[0].msg.BatchID != b.ID {
				t.Fatalf("overdue delivery: sweep queued %v, want its webhook message", kinds(sent))
			}
			hook := w.receiveN(1, 10*time.Second)
			// Another sweep meanwhile (a concurrent one) queues nothing more.
			if sent := w.sweep(); len(sent) != 0 {
				t.Fatalf("second sweep queued %v", kinds(sent))
			}
			w.handle(hook...)
			w.drain()
			d, err := w.st.Delivery(w.ctx, b.AccountID, b.ID)
			if err != nil || d.State != evs.CallbackDelivered || d.Attempts != 1 {
				t.Fatalf("delivery %+v %v", d, err)
			}
			sec, err := w.st.WebhookSecret(w.ctx, b.AccountID)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(calls) != 1 {
				t.Fatalf("%d calls, want 1", len(calls))
			}
			got := calls[0]
			key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec.Current, "whsec_"))
			if err != nil {
				t.Fatal(err)
			}
			mac := hmac.New(sha256.New, key)
			mac.Write([]byte(got.id + "." + got.ts + "."))
			mac.Write(got.body)
			if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); got.sig != want {
				t.Errorf("signature %q, want %q", got.sig, want)
			}
			if !strings.Contains(string(got.body), `"type":"batch.`+string(final)+`"`) || !strings.Contains(string(got.body), b.ID) {
				t.Errorf("event body %s", got.body)
			}
			// Delivered: later sweeps leave it alone.
			c.add(time.Hour)
			if sent := w.sweep(); len(sent) != 0 {
				t.Fatalf("sweep after delivery queued %v", kinds(sent))
			}
		})
	}
}

// TestSweepDeadlineQueuesWebhook: a batch the sweep finishes at its
// deadline gets its webhook message at once, as one completed by work does.
func TestSweepDeadlineQueuesWebhook(t *testing.T) {
	t.Parallel()
	got := make(chan string, 4)
	rc := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- string(body)
	}))
	defer rc.Close()
	w, c := sweepWorld(t, 200)
	loop, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	w.w.Webhooks = &webhook.Deliverer{Store: w.st, Client: webhook.NewClient(loop), Body: api.EventBody}
	w.w.Deadline = time.Hour
	b, _ := newCallbackBatch(w, rc.URL+"/hook")
	c.add(2 * time.Hour)
	sent := w.sweep()
	if len(sent) != 1 || sent[0].msg.Kind != batch.KindWebhook || sent[0].msg.BatchID != b.ID {
		t.Fatalf("sweep past the deadline queued %v, want the webhook", kinds(sent))
	}
	w.drain()
	select {
	case body := <-got:
		if !strings.Contains(body, `"type":"batch.completed"`) || !strings.Contains(body, `"unknown":1`) {
			t.Errorf("event %s", body)
		}
	default:
		t.Fatal("the receiver got no event")
	}
}
