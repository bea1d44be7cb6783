package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

func TestMain(m *testing.M) { os.Exit(testkit.MotoMain(m)) }

// noNetwork is the live engine of these tests: every account is in test
// mode, so the worker must never call it.
type noNetwork struct{ t *testing.T }

func (n noNetwork) VerifyDomain(context.Context, []string, evs.Mode) []evs.Decision {
	n.t.Error("the live engine was called for a test-mode account")
	return nil
}

// sendRecorder passes SendMessageBatch calls through to moto and remembers
// each entry's body and delay, which SQS does not report on receipt.
type sendRecorder struct {
	app.Client
	mu   sync.Mutex
	sent []sentEntry
}

// sendStamp is the message attribute that names one send of one entry.
const sendStamp = "evs-test-send"

type sentEntry struct {
	msg   batch.Message
	delay int32
}

func (r *sendRecorder) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	// Stamp each entry once, before the SDK's retry loop: a resend of a
	// call whose reply was lost carries the same stamp, so receive can tell
	// that duplicate from a message the worker really sent twice.
	stamp(in)
	out, err := r.Client.SendMessageBatch(ctx, in, optFns...)
	if err != nil {
		return out, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range in.Entries {
		var m batch.Message
		if jerr := json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &m); jerr != nil {
			return nil, fmt.Errorf("recorder: the queue sent a body that is not a Message: %w", jerr)
		}
		r.sent = append(r.sent, sentEntry{msg: m, delay: e.DelaySeconds})
	}
	return out, err
}

func (r *sendRecorder) take() []sentEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sent
	r.sent = nil
	return s
}

// world is a DynamoDB store and an SQS queue on moto, a test-mode account
// and a worker wired to them as the worker Lambda wires them.
type world struct {
	t     *testing.T
	ctx   context.Context
	st    *dynamostore.Store
	sqs   *sqs.Client
	url   string
	rec   *sendRecorder
	q     *app.Queue
	w     *batch.Worker
	acct  evs.Account
	logs  *testkit.LogBuffer
	batch evs.Batch
	// stamps holds the send stamps received so far: on a loaded machine
	// the SDK resends a SendMessageBatch whose reply was lost, and moto
	// then holds the entry twice. Real SQS duplicates too (at least once);
	// the worker's idempotence is tested on purpose elsewhere, so receive
	// drops such resends rather than let them change a test's counts.
	stamps map[string]bool
	// maxAge is the maxAge of the batches createBatch makes.
	maxAge time.Duration
}

func newWorld(t *testing.T, packSize int, greyBackoff time.Duration, maxGrey int) *world {
	t.Helper()
	ctx := context.Background()
	tables := dynamostore.Tables{
		Keys: testkit.UniqueName(t, "keys"), Batches: testkit.UniqueName(t, "batches"),
		Results: testkit.UniqueName(t, "results"), Idempotency: testkit.UniqueName(t, "idem"),
	}
	ddb := testkit.DynamoDB(t)
	if err := dynamostore.CreateTables(ctx, ddb, tables); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	tables.Inputs = testkit.Bucket(t, testkit.S3(t))
	st := dynamostore.New(dynamostore.Config{Client: ddb, Objects: testkit.S3(t), Tables: tables, Now: time.Now})
	sc := testkit.SQS(t)
	q, err := sc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(testkit.UniqueName(t, "work"))})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	acct := evs.Account{ID: "acct-" + uuid.NewString(), Name: testkit.UniqueName(t, "acct"), Test: true, CreatedAt: time.Now().UTC()}
	if err := st.CreateAccount(ctx, acct); err != nil {
		t.Fatalf("create account: %v", err)
	}
	w := &world{t: t, ctx: ctx, st: st, sqs: sc, url: aws.ToString(q.QueueUrl), acct: acct, logs: &testkit.LogBuffer{}}
	w.rec = &sendRecorder{Client: sc}
	w.q = app.NewQueue(w.rec, w.url)
	w.w = &batch.Worker{
		Queue: w.q, Store: st, Accounts: st,
		Processor:   &batch.Processor{Engine: noNetwork{t}, Sandbox: verify.NewSandbox(nil), MaxGreyAttempts: maxGrey},
		Logger:      slog.New(slog.NewJSONHandler(w.logs, nil)),
		PackSize:    packSize,
		GreyBackoff: greyBackoff,
	}
	return w
}

// liveAccount makes the world's account a live one, whose engine answers
// as the sandbox does (the local part picks the outcome): what differs for
// live accounts (the greylisting back-off) is then tested without a network.
func (w *world) liveAccount() {
	w.t.Helper()
	a := evs.Account{ID: "acct-" + uuid.NewString(), Name: testkit.UniqueName(w.t, "live"), CreatedAt: time.Now().UTC()}
	if err := w.st.CreateAccount(w.ctx, a); err != nil {
		w.t.Fatalf("create account: %v", err)
	}
	w.acct = a
	w.w.Processor.Engine = verify.NewSandbox(nil)
}

// createBatch stores a batch of emails the way the requests API does:
// duplicates (by normalized address) are counted, not stored.
func (w *world) createBatch(mode evs.Mode, emails ...string) evs.Batch {
	w.t.Helper()
	seen := map[string]bool{}
	var items []evs.Item
	for _, e := range emails {
		key, domain := strings.TrimSpace(e), ""
		if in := verify.Inspect(e); in.Valid {
			key, domain = in.Address.String(), in.Address.Domain
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		items = append(items, evs.Item{Seq: len(items), Email: e, Domain: domain})
	}
	now := time.Now().UTC()
	b := evs.Batch{
		ID: uuid.NewString(), AccountID: w.acct.ID, Mode: mode, State: evs.StateQueued,
		CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour),
		Counters: evs.Counters{Total: len(emails), Duplicates: len(emails) - len(items)},
		MaxAge:   w.maxAge,
	}
	if err := w.st.CreateBatch(w.ctx, b, items); err != nil {
		w.t.Fatalf("create batch: %v", err)
	}
	w.batch = b
	return b
}

// receive takes up to max messages off the queue, waiting up to wait for
// the first, and deletes them, as the event source mapping does after a
// successful invocation.
func (w *world) receive(max int32, wait int32) []types.Message {
	w.t.Helper()
	out, err := w.sqs.ReceiveMessage(w.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.url), MaxNumberOfMessages: max, WaitTimeSeconds: wait,
		MessageAttributeNames: []string{sendStamp}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameSentTimestamp, types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp}})
	if err != nil {
		w.t.Fatalf("receive: %v", err)
	}
	var fresh []types.Message
	for _, m := range out.Messages {
		if _, err := w.sqs.DeleteMessage(w.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.url), ReceiptHandle: m.ReceiptHandle}); err != nil {
			w.t.Fatalf("delete: %v", err)
		}
		if a, ok := m.MessageAttributes[sendStamp]; ok {
			stamp := aws.ToString(a.StringValue)
			if w.stamps[stamp] {
				continue // the SDK's resend of an entry already received
			}
			if w.stamps == nil {
				w.stamps = map[string]bool{}
			}
			w.stamps[stamp] = true
		}
		fresh = append(fresh, m)
	}
	return fresh
}

// stampSet drops, for workers that receive side by side, the SDK's
// resends of an entry already received (see world.stamps): real SQS
// duplicates too, but the tests that count how often a server was asked
// count the worker's doing, not the SDK's.
type stampSet struct {
	mu   sync.Mutex
	seen map[string]bool
}

// fresh is ms without the resends of entries received before.
func (s *stampSet) fresh(ms []types.Message) []types.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	var out []types.Message
	for _, m := range ms {
		if a, ok := m.MessageAttributes[sendStamp]; ok {
			stamp := aws.ToString(a.StringValue)
			if s.seen[stamp] {
				continue
			}
			s.seen[stamp] = true
		}
		out = append(out, m)
	}
	return out
}

// stamp names each entry of in, once, before the SDK's retry loop: a
// resend of a call whose reply was lost carries the same stamp.
func stamp(in *sqs.SendMessageBatchInput) {
	for i := range in.Entries {
		if in.Entries[i].MessageAttributes == nil {
			in.Entries[i].MessageAttributes = map[string]types.MessageAttributeValue{}
		}
		if _, ok := in.Entries[i].MessageAttributes[sendStamp]; !ok {
			in.Entries[i].MessageAttributes[sendStamp] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(uuid.NewString())}
		}
	}
}

// lostReceiveWait outlasts the queue's 30 s visibility timeout: on a loaded
// machine a receive whose reply is lost (moto marked the message in flight,
// the SDK retried) hides its message until the timeout, and a wait shorter
// than that would call the message lost.
const lostReceiveWait = 40 * time.Second

// receiveN receives until n messages arrived or the deadline passes (never
// sooner than lostReceiveWait).
func (w *world) receiveN(n int, limit time.Duration) []types.Message {
	w.t.Helper()
	var got []types.Message
	deadline := time.Now().Add(max(limit, lostReceiveWait))
	for len(got) < n && time.Now().Before(deadline) {
		got = append(got, w.receive(10, 1)...)
	}
	if len(got) != n {
		w.t.Fatalf("received %d messages, want %d", len(got), n)
	}
	return got
}

// assertEmpty checks that nothing more is queued (also nothing delayed:
// the approximate counts include delayed messages).
func (w *world) assertEmpty() {
	w.t.Helper()
	out, err := w.sqs.GetQueueAttributes(w.ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(w.url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		w.t.Fatalf("queue attributes: %v", err)
	}
	for k, v := range out.Attributes {
		if v != "0" {
			w.t.Fatalf("queue not empty: %s = %s", k, v)
		}
	}
}

func event(ms ...types.Message) events.SQSEvent {
	var ev events.SQSEvent
	for _, m := range ms {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body), EventSource: "aws:sqs"})
	}
	return ev
}

// handle feeds ms to the worker and requires that none failed.
func (w *world) handle(ms ...types.Message) {
	w.t.Helper()
	resp, err := app.SQSHandler(w.w)(w.ctx, event(ms...))
	if err != nil || len(resp.BatchItemFailures) > 0 {
		w.t.Fatalf("Handle: %v, failures %+v\nlogs: %s", err, resp.BatchItemFailures, w.logs.String())
	}
}

func decode(t *testing.T, m types.Message) batch.Message {
	t.Helper()
	var out batch.Message
	if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &out); err != nil {
		t.Fatalf("message body: %v: %s", err, aws.ToString(m.Body))
	}
	return out
}

func (w *world) current() evs.Batch {
	w.t.Helper()
	b, err := w.st.Batch(w.ctx, w.batch.AccountID, w.batch.ID)
	if err != nil {
		w.t.Fatalf("batch: %v", err)
	}
	return b
}

// results maps each stored result's email to "status/reason".
func (w *world) results() map[string]string {
	w.t.Helper()
	rs, err := w.st.Results(w.ctx, w.batch.AccountID, w.batch.ID, -1, 1000, "")
	if err != nil {
		w.t.Fatalf("results: %v", err)
	}
	out := map[string]string{}
	for _, r := range rs {
		d := r.Decision
		if _, dup := out[r.Email]; dup {
			w.t.Fatalf("two results for item %d", r.Seq)
		}
		out[r.Email] = string(r.Status()) + "/" + string(d.Reason)
	}
	return out
}

func (w *world) checkCounters(want evs.Counters) {
	w.t.Helper()
	if got := w.current().Counters; got != want {
		w.t.Fatalf("counters %+v, want %+v", got, want)
	}
}

// mixed is a batch of test-mode addresses over three domains plus one
// invalid address and one duplicate.
var mixed = []string{
	"accepted_email@x.example", "rejected_email@y.example", "mailbox_full@x.example",
	"accept_all@z.example", "not an address", "accepted_email@X.Example", "team+rejected-email@x.example",
}

var mixedResults = map[string]string{
	"accepted_email@x.example":      "deliverable/accepted_email",
	"rejected_email@y.example":      "undeliverable/rejected_email",
	"mailbox_full@x.example":        "risky/mailbox_full",
	"accept_all@z.example":          "risky/accept_all",
	"not an address":                "undeliverable/invalid_syntax",
	"team+rejected-email@x.example": "undeliverable/rejected_email",
}

var mixedCounters = evs.Counters{Total: 7, Duplicates: 1, Processed: 6, Deliverable: 1, Undeliverable: 3, Risky: 2}

// TestWorkerPlanAndWork runs a batch through the queue: Enqueue sends one
// plan message; the worker turns it into work messages packed by domain and
// marks the batch running; the work messages write every result, and the
// last one completes the batch.
func TestWorkerPlanAndWork(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		packSize int
		want     [][]string // domains of each work message, in order
	}{
		// x.example has 3 distinct items, y and z one each, the invalid
		// address (no domain) one.
		{"one message", 200, [][]string{{"x", "x", "x", "y", "z", ""}}},
		{"domains kept together", 3, [][]string{{"x", "x", "x"}, {"y", "z", ""}}},
		{"one address per message", 1, [][]string{{"x"}, {"x"}, {"x"}, {"y"}, {"z"}, {""}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.packSize, time.Second, 3)
			b := w.createBatch("quick", mixed...)
			if err := w.q.Enqueue(w.ctx, b); err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			plan := w.receiveN(1, 10*time.Second)
			if m := decode(t, plan[0]); m.Kind != batch.KindPlan || m.AccountID != b.AccountID || m.BatchID != b.ID || len(m.Items) != 0 {
				t.Fatalf("plan message: %+v", m)
			}
			w.handle(plan...)
			if got := w.current(); got.State != evs.StateRunning || got.Counters.Processed != 0 {
				t.Fatalf("after plan: state %s counters %+v", got.State, got.Counters)
			}

			work := w.receiveN(len(tc.want), 10*time.Second)
			// SQS does not keep order; the recorder saw the send order.
			var got [][]string
			for _, e := range w.rec.take() {
				if e.msg.Kind == batch.KindPlan {
					continue
				}
				if e.msg.Kind != batch.KindWork || e.msg.BatchID != b.ID || e.msg.Attempt != 0 || e.delay != 0 {
					t.Fatalf("work message %+v delay %d", e.msg, e.delay)
				}
				var ds []string
				for _, it := range e.msg.Items {
					ds = append(ds, strings.TrimSuffix(it.Domain, ".example"))
				}
				got = append(got, ds)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("work messages by domain %v, want %v", got, tc.want)
			}

			// Deliver all but the last: the batch runs on, counters partial.
			w.handle(work[:len(work)-1]...)
			if cur := w.current(); cur.State != evs.StateRunning || cur.Counters.Processed >= mixedCounters.Processed {
				t.Fatalf("before the last message: state %s counters %+v", cur.State, cur.Counters)
			}
			w.handle(work[len(work)-1])
			final := w.current()
			if final.State != evs.StateCompleted || final.CompletedAt.IsZero() {
				t.Fatalf("final state %s, completedAt %v", final.State, final.CompletedAt)
			}
			w.checkCounters(mixedCounters)
			if got := w.results(); fmt.Sprint(got) != fmt.Sprint(mixedResults) {
				t.Fatalf("results %v\nwant %v", got, mixedResults)
			}
			w.assertEmpty()
		})
	}
}

// TestWorkerRedeliveryCountsOnce: SQS delivers at least once, so a plan or
// work message may arrive twice, in one event or in two; the store's
// exactly-once writes keep the counters equal to the distinct items.
func TestWorkerRedeliveryCountsOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		run  func(w *world, work []types.Message)
	}{
		{"work message twice in a row", func(w *world, work []types.Message) {
			w.handle(work...)
			w.handle(work...)
		}},
		{"work message twice in one event", func(w *world, work []types.Message) {
			w.handle(append(append([]types.Message(nil), work...), work...)...)
		}},
		{"work message again after completion", func(w *world, work []types.Message) {
			w.handle(work...)
			if s := w.current().State; s != evs.StateCompleted {
				w.t.Fatalf("state %s after first delivery", s)
			}
			w.handle(work...)
		}},
		{"first part redelivered while the rest is pending", func(w *world, work []types.Message) {
			w.handle(work[0])
			w.handle(work[0])
			if p := w.current().Counters.Processed; p != 3 {
				w.t.Fatalf("processed %d after x.example twice, want 3", p)
			}
			w.handle(work[1:]...)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 3, time.Second, 3)
			b := w.createBatch("quick", mixed...)
			if err := w.q.Enqueue(w.ctx, b); err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			w.handle(w.receiveN(1, 10*time.Second)...)
			work := w.receiveN(2, 10*time.Second)
			// Put x.example's message first, as the last case expects.
			if decode(t, work[0]).Items[0].Domain != "x.example" {
				work[0], work[1] = work[1], work[0]
			}
			tc.run(w, work)
			if s := w.current().State; s != evs.StateCompleted {
				t.Fatalf("state %s", s)
			}
			w.checkCounters(mixedCounters)
			if got := w.results(); fmt.Sprint(got) != fmt.Sprint(mixedResults) {
				t.Fatalf("results %v", got)
			}
			w.assertEmpty()
		})
	}

	t.Run("plan message twice", func(t *testing.T) {
		w := newWorld(t, 200, time.Second, 3)
		b := w.createBatch("quick", mixed...)
		if err := w.q.Enqueue(w.ctx, b); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		plan := w.receiveN(1, 10*time.Second)
		w.handle(plan...)
		w.handle(plan...) // the batch is running now: still planned again
		work := w.receiveN(2, 10*time.Second)
		w.handle(work...)
		w.checkCounters(mixedCounters)
		w.handle(plan...) // completed: nothing more to plan
		w.assertEmpty()
	})
}

// TestWorkerGreylistResend: a greylisted answer before the last attempt
// writes no result; the address goes back on the queue with an SQS delay of
// GreyDelay (1 s for this test-mode account), and the last attempt writes
// unknown/greylisted.
func TestWorkerGreylistResend(t *testing.T) {
	t.Parallel()
	const maxGrey = 3
	w := newWorld(t, 200, time.Second, maxGrey)
	b := w.createBatch("full", "greylisted@x.example", "accepted_email@x.example", "team+greylisted@y.example")
	if err := w.q.Enqueue(w.ctx, b); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	w.handle(w.receiveN(1, 10*time.Second)...)
	work := w.receiveN(1, 10*time.Second)
	w.rec.take()

	for attempt := 0; attempt < maxGrey; attempt++ {
		if m := decode(t, work[0]); m.Attempt != attempt {
			t.Fatalf("message of attempt %d says attempt %d", attempt, m.Attempt)
		}
		w.handle(work...)
		cur := w.current()
		sent := w.rec.take()
		if attempt == maxGrey-1 {
			if len(sent) != 0 {
				t.Fatalf("last attempt resent %+v", sent)
			}
			break
		}
		// Before the last attempt only accepted_email has a result.
		if cur.State != evs.StateRunning || cur.Counters.Processed != 1 || cur.Counters.Deliverable != 1 {
			t.Fatalf("after attempt %d: state %s counters %+v", attempt, cur.State, cur.Counters)
		}
		wantDelay := int32(batch.GreyDelay(time.Second, attempt+1, true) / time.Second)
		if len(sent) != 1 || sent[0].msg.Kind != batch.KindWork || sent[0].msg.Attempt != attempt+1 || sent[0].delay != wantDelay || len(sent[0].msg.Items) != 2 {
			t.Fatalf("after attempt %d sent %+v, want one work message of attempt %d with both greylisted items, delay %d", attempt, sent, attempt+1, wantDelay)
		}
		// moto honours the delay: the queue's own record says the message
		// was first received its delay or more after it was sent.
		early := w.receive(10, 0)
		work = append(early, w.receiveN(1-len(early), time.Duration(wantDelay+5)*time.Second)...)
		sentMs, err1 := strconv.ParseInt(work[0].Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
		firstMs, err2 := strconv.ParseInt(work[0].Attributes[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("retry of attempt %d: no sent or first-receive time: %v", attempt+1, work[0].Attributes)
		}
		if waited := time.Duration(firstMs-sentMs) * time.Millisecond; waited < time.Duration(wantDelay)*time.Second {
			t.Fatalf("retry of attempt %d received %v after it was sent, before its %d s delay", attempt+1, waited, wantDelay)
		}
	}
	final := w.current()
	if final.State != evs.StateCompleted {
		t.Fatalf("final state %s", final.State)
	}
	w.checkCounters(evs.Counters{Total: 3, Processed: 3, Deliverable: 1, Unknown: 2})
	want := map[string]string{
		"greylisted@x.example":      "unknown/greylisted",
		"accepted_email@x.example":  "deliverable/accepted_email",
		"team+greylisted@y.example": "unknown/greylisted",
	}
	if got := w.results(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("results %v, want %v", got, want)
	}
	w.assertEmpty()
}

// TestWorkerGreylistDelayCap: for a live account the back-off doubles, but
// SQS refuses delays over 900 s, so the worker caps them; for a test-mode
// account every back-off is 1 s (contract, section 8). The resent messages
// are taken from the recorder rather than waited for.
func TestWorkerGreylistDelayCap(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		test    bool
		backoff time.Duration
		want    []int32 // delays of the resends after attempts 0, 1, ...
	}{
		{"live 5m", false, 5 * time.Minute, []int32{300, 600, 900, 900}},
		{"live 10m", false, 10 * time.Minute, []int32{600, 900, 900, 900}},
		{"live default", false, 0, []int32{300, 600, 900, 900}}, // 5 min
		{"test mode", true, 5 * time.Minute, []int32{1, 1, 1, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 200, tc.backoff, len(tc.want)+1)
			if !tc.test {
				w.liveAccount()
			}
			b := w.createBatch("quick", "greylisted@x.example")
			m := batch.Message{Kind: batch.KindWork, AccountID: b.AccountID, BatchID: b.ID,
				Items: []evs.Item{{Seq: 0, Email: "greylisted@x.example", Domain: "x.example"}}}
			for attempt, want := range tc.want {
				body, _ := json.Marshal(m)
				w.handle(types.Message{MessageId: aws.String(fmt.Sprintf("m%d", attempt)), Body: aws.String(string(body))})
				sent := w.rec.take()
				if len(sent) != 1 || sent[0].delay != want || sent[0].msg.Attempt != attempt+1 {
					t.Fatalf("after attempt %d: sent %+v, want one resend with delay %d", attempt, sent, want)
				}
				m = sent[0].msg
			}
			body, _ := json.Marshal(m)
			w.handle(types.Message{MessageId: aws.String("last"), Body: aws.String(string(body))})
			if sent := w.rec.take(); len(sent) != 0 {
				t.Fatalf("last attempt resent %+v", sent)
			}
			w.checkCounters(evs.Counters{Total: 1, Processed: 1, Unknown: 1})
		})
	}
}

// failingStore makes every batch read fail as a DynamoDB outage would.
type failingStore struct{ batch.Store }

func (failingStore) Batch(context.Context, string, string) (evs.Batch, error) {
	return evs.Batch{}, evs.Errorf(evs.CodeUnavailable, "injected outage")
}

// TestWorkerUnreadableMessage pins what Handle does with a message it
// cannot act on. As app.go documents, a body that is not a Message, or
// a Message of unknown kind, is logged by message ID (never its body, which
// may hold addresses) and reported in BatchItemFailures, so SQS keeps it
// until maxReceiveCount moves it to the dead-letter queue; a readable message
// whose work fails is reported the same way. A work message for a batch
// that does not exist (expired) is done: nothing is reported. The readable
// records of the same event are processed either way.
func TestWorkerUnreadableMessage(t *testing.T) {
	t.Parallel()
	const unreadable = "unreadable message; it goes to the dead-letter queue"
	cases := []struct {
		name    string
		body    string
		log     string // the message Handle logs
		failing bool   // use a store that is down
		failed  bool   // reported in BatchItemFailures
	}{
		{"not JSON", "this is not json", unreadable, false, true},
		{"truncated JSON", `{"kind":"work","accountId":`, unreadable, false, true},
		{"JSON of the wrong shape", `{"kind":"work","items":"accepted_email@x.example"}`, unreadable, false, true},
		{"JSON array", `[1,2,3]`, unreadable, false, true},
		{"unknown kind", `{"kind":"mystery","accountId":"a","batchId":"b"}`, `unknown message kind \"mystery\"`, false, true},
		{"unknown batch", `{"kind":"work","accountId":"a","batchId":"00000000-0000-0000-0000-000000000000","items":[{"Seq":0,"Email":"x@y.example","Domain":"y.example"}]}`, "", false, false},
		{"store down", `{"kind":"work","accountId":"a","batchId":"b","items":[{"Seq":0,"Email":"x@y.example","Domain":"y.example"}]}`, "message failed; it will be redelivered", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 200, time.Second, 3)
			b := w.createBatch("quick", "accepted_email@x.example")
			if tc.failing {
				w.w.Store = failingStore{w.w.Store}
			}
			good, _ := json.Marshal(batch.Message{Kind: batch.KindWork, AccountID: b.AccountID, BatchID: b.ID,
				Items: []evs.Item{{Seq: 0, Email: "accepted_email@x.example", Domain: "x.example"}}})
			ev := event(
				types.Message{MessageId: aws.String("bad-1"), Body: aws.String(tc.body)},
				types.Message{MessageId: aws.String("good-1"), Body: aws.String(string(good))},
			)
			resp, err := app.SQSHandler(w.w)(w.ctx, ev)
			if err != nil {
				t.Fatalf("Handle returned an error for the whole event: %v", err)
			}
			var failed []string
			for _, f := range resp.BatchItemFailures {
				failed = append(failed, f.ItemIdentifier)
			}
			want := []string{}
			if tc.failed {
				want = append(want, "bad-1")
			}
			if tc.failing {
				want = append(want, "good-1") // the store is down for both
			}
			if fmt.Sprint(failed) != fmt.Sprint(want) {
				t.Fatalf("BatchItemFailures %v, want %v", failed, want)
			}
			logs := w.logs.String()
			if tc.log != "" && (!strings.Contains(logs, tc.log) || !strings.Contains(logs, `"messageId":"bad-1"`)) {
				t.Fatalf("logs do not say %q for bad-1:\n%s", tc.log, logs)
			}
			// The body may hold addresses: it is never logged.
			if strings.Contains(logs, "accepted_email@") || strings.Contains(logs, "x@y.example") {
				t.Fatalf("an address was logged:\n%s", logs)
			}
			if !tc.failing {
				// The readable record of the same event was processed.
				if cur := w.current(); cur.State != evs.StateCompleted || cur.Counters.Deliverable != 1 {
					t.Fatalf("good record not processed: %s %+v", cur.State, cur.Counters)
				}
			}
		})
	}
}
