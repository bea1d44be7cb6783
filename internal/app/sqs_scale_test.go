package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsmw "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// call is one AWS API call the recorder saw: its service and operation,
// when, the partition key of every item it writes (table/key), and how
// many items it read.
type call struct {
	service, op string
	at          time.Time
	took        time.Duration
	writes      []string
	read        int
	// attempts is how many times the SDK sent it (more than one: retried).
	attempts int
}

// attemptsKey carries a call's attempt counter from the operation's
// middleware to the one each attempt runs through.
type attemptsKey struct{}

// callLog records every DynamoDB, SQS and S3 call of the clients it is
// attached to, with an SDK middleware: the numbers below are counted from
// what the code really sends, not computed from the design.
type callLog struct {
	mu    sync.Mutex
	calls []call
	hash  map[string]string // table → its partition key attribute
}

func newCallLog(t dynamostore.Tables) *callLog {
	return &callLog{hash: map[string]string{t.Keys: "pk", t.Batches: "accountId", t.Results: "batchId", t.Idempotency: "scope"}}
}

// option adds the recorder to a client of any service.
func (l *callLog) option(stack *middleware.Stack) error {
	if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("evs-call-log",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			c := call{service: awsmw.GetServiceID(ctx), op: awsmw.GetOperationName(ctx), at: time.Now()}
			c.writes = l.writes(in.Parameters)
			out, md, err := next.HandleInitialize(context.WithValue(ctx, attemptsKey{}, &c.attempts), in)
			c.took = time.Since(c.at)
			if err == nil {
				c.read = itemsRead(out.Result)
			}
			l.mu.Lock()
			l.calls = append(l.calls, c)
			l.mu.Unlock()
			return out, md, err
		}), middleware.Before); err != nil {
		return err
	}
	// After the retry middleware: once per attempt.
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("evs-call-attempts",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if n, ok := ctx.Value(attemptsKey{}).(*int); ok {
				*n++
			}
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

// writes names the partition of every item a DynamoDB write touches.
func (l *callLog) writes(in any) []string {
	key := func(table string, it map[string]ddbtypes.AttributeValue) string {
		v, _ := it[l.hash[table]].(*ddbtypes.AttributeValueMemberS)
		if v == nil {
			return table + "/?"
		}
		return table + "/" + v.Value
	}
	var out []string
	switch in := in.(type) {
	case *dynamodb.PutItemInput:
		out = append(out, key(*in.TableName, in.Item))
	case *dynamodb.UpdateItemInput:
		out = append(out, key(*in.TableName, in.Key))
	case *dynamodb.DeleteItemInput:
		out = append(out, key(*in.TableName, in.Key))
	case *dynamodb.BatchWriteItemInput:
		for table, reqs := range in.RequestItems {
			for _, r := range reqs {
				if r.PutRequest != nil {
					out = append(out, key(table, r.PutRequest.Item))
				} else if r.DeleteRequest != nil {
					out = append(out, key(table, r.DeleteRequest.Key))
				}
			}
		}
	case *dynamodb.TransactWriteItemsInput:
		for _, ti := range in.TransactItems {
			switch {
			case ti.Put != nil:
				out = append(out, key(*ti.Put.TableName, ti.Put.Item))
			case ti.Update != nil:
				out = append(out, key(*ti.Update.TableName, ti.Update.Key))
			case ti.Delete != nil:
				out = append(out, key(*ti.Delete.TableName, ti.Delete.Key))
			}
		}
	}
	return out
}

// itemsRead counts the items a DynamoDB read returned (evaluated, for a
// Query: what it is billed for).
func itemsRead(out any) int {
	switch o := out.(type) {
	case *dynamodb.GetItemOutput:
		if o.Item != nil {
			return 1
		}
	case *dynamodb.QueryOutput:
		return int(o.ScannedCount)
	case *dynamodb.BatchGetItemOutput:
		n := 0
		for _, rs := range o.Responses {
			n += len(rs)
		}
		return n
	}
	return 0
}

func (l *callLog) since(t time.Time) []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []call
	for _, c := range l.calls {
		if !c.at.Before(t) {
			out = append(out, c)
		}
	}
	return out
}

// ops summarises calls as "Service.Op×n", sorted.
func ops(cs []call) string {
	n := map[string]int{}
	for _, c := range cs {
		n[c.service+"."+c.op]++
	}
	var out []string
	for k, v := range n {
		out = append(out, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// timed is ops with the time spent in each kind of call.
func timed(cs []call) string {
	n := map[string]int{}
	took := map[string]time.Duration{}
	for _, c := range cs {
		n[c.service+"."+c.op]++
		took[c.service+"."+c.op] += c.took
	}
	var out []string
	for k, v := range n {
		out = append(out, fmt.Sprintf("%s×%d(%v)", k, v, took[k].Round(time.Millisecond)))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// busiestSecond returns the most writes one partition key received in
// any one-second window, and that key.
func busiestSecond(cs []call) (int, string) {
	at := map[string][]time.Time{}
	for _, c := range cs {
		for _, k := range c.writes {
			at[k] = append(at[k], c.at)
		}
	}
	best, bestKey := 0, ""
	for k, ts := range at {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		lo := 0
		for hi := range ts {
			for ts[hi].Sub(ts[lo]) >= time.Second {
				lo++
			}
			if n := hi - lo + 1; n > best {
				best, bestKey = n, k
			}
		}
	}
	return best, bestKey
}

// scaleWorld is the requests function's handler and a worker on moto,
// every client recorded.
type scaleWorld struct {
	t      *testing.T
	log    *callLog
	st     *dynamostore.Store
	h      *api.Handler
	w      *batch.Worker
	sqs    *sqs.Client
	url    string
	acct   string
	tables dynamostore.Tables
	works  map[string]batch.Message // the work messages drain handled, by SQS message ID
}

func newScaleWorld(t *testing.T) *scaleWorld {
	t.Helper()
	ctx := context.Background()
	tables := dynamostore.Tables{
		Keys: testkit.UniqueName(t, "keys"), Batches: testkit.UniqueName(t, "batches"),
		Results: testkit.UniqueName(t, "results"), Idempotency: testkit.UniqueName(t, "idem"),
	}
	if err := dynamostore.CreateTables(ctx, testkit.DynamoDB(t), tables); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	tables.Inputs = testkit.Bucket(t, testkit.S3(t))
	log := newCallLog(tables)
	ddb := testkit.DynamoDB(t, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, log.option) })
	objects := testkit.S3(t, func(o *s3.Options) { o.APIOptions = append(o.APIOptions, log.option) })
	sc := testkit.SQS(t, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, log.option) })
	st := dynamostore.New(dynamostore.Config{Client: ddb, Objects: objects, Presign: s3.NewPresignClient(objects), Tables: tables, Now: time.Now})
	q, err := sc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(testkit.UniqueName(t, "work"))})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	acct := evs.Account{ID: "acct-" + uuid.NewString(), Name: testkit.UniqueName(t, "acct"), Test: true, CreatedAt: time.Now().UTC()}
	if err := st.CreateAccount(ctx, acct); err != nil {
		t.Fatalf("create account: %v", err)
	}
	queue := app.NewQueue(sc, aws.ToString(q.QueueUrl))
	logger := slog.New(slog.DiscardHandler)
	return &scaleWorld{
		t: t, log: log, st: st, sqs: sc, url: aws.ToString(q.QueueUrl), acct: acct.ID, tables: tables,
		h: api.New(api.Deps{Idempotency: idempotency.New(st, time.Now), Batches: st, Queue: queue, Logger: logger, MaxActiveBatches: 10,
			// Small, so a small batch's CSV takes the export path.
			MaxCSVReply: 4 << 10, Uploads: st,
			ExportJobs: &api.ExportJobs{Store: st, Queue: func(ctx context.Context, j store.ExportJob) error {
				return queue.Send(ctx, []batch.Message{batch.ExportMessage(j)}, 0)
			}}}),
		w: &batch.Worker{
			Queue: queue, Store: st, Accounts: st, Logger: logger,
			// As functions/worker wires it.
			Exports: st, ExportCSV: api.ExportCSV(st, nil),
			Processor: &batch.Processor{Engine: noNetwork{t}, Sandbox: verify.NewSandbox(nil)},
			// Small windows, so small batches (moto's transactions slow
			// down as a table grows) are planned in many steps.
			PlanWindow: 100,
		},
	}
}

// create posts a batch of n distinct test-mode addresses over 50 domains
// to the requests handler, as API Gateway would, and returns its ID and
// the calls the create made.
func (w *scaleWorld) create(n int) (string, []call) {
	w.t.Helper()
	emails := make([]string, n)
	for i := range emails {
		emails[i] = fmt.Sprintf("u%d+accepted_email@d%d.example", i, i%50)
	}
	body, _ := json.Marshal(map[string]any{"emails": emails, "mode": "quick"})
	req := events.APIGatewayProxyRequest{
		Resource: "/v1/requests", Path: "/v1/requests", HTTPMethod: http.MethodPost, Body: string(body),
		Headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": uuid.NewString()},
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID: uuid.NewString(), ResourcePath: "/v1/requests", HTTPMethod: http.MethodPost,
			Authorizer: map[string]any{"principalId": w.acct, "accountId": w.acct, "keyId": "k1", "testMode": "true"},
		},
	}
	start := time.Now()
	resp, err := lambda.Proxy(api.Mux(api.ObserveOptions{}, w.h.MountAll(nil)))(context.Background(), req)
	if err != nil {
		w.t.Fatalf("create %d addresses: %v", n, err)
	}
	return w.created(resp, n), w.log.since(start)
}

// created checks that resp is the 201 of a queued batch of n addresses
// and returns its ID.
func (w *scaleWorld) created(resp events.APIGatewayProxyResponse, n int) string {
	w.t.Helper()
	var env struct {
		Request struct {
			ID    string    `json:"id"`
			State evs.State `json:"state"`
		} `json:"request"`
		Counters struct {
			Total int `json:"total"`
		} `json:"counters"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &env); err != nil || resp.StatusCode != http.StatusCreated || env.Counters.Total != n || env.Request.State != evs.StateQueued {
		w.t.Fatalf("create %d addresses: %d %s", n, resp.StatusCode, resp.Body)
	}
	return env.Request.ID
}

// drain runs the worker on the queue's messages until the batch completes,
// one receive (up to ten messages, as the event source mapping hands them)
// per invocation, and returns the calls made while handling plan messages.
func (w *scaleWorld) drain(id string) (planCalls []call) {
	w.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		out, err := w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			w.t.Fatalf("receive: %v", err)
		}
		// Work before plans, as a busy queue would run them: a plan then
		// finds its window's work done and plans the next one at once.
		sort.SliceStable(out.Messages, func(i, j int) bool {
			return !strings.Contains(aws.ToString(out.Messages[i].Body), `"kind":"plan"`) &&
				strings.Contains(aws.ToString(out.Messages[j].Body), `"kind":"plan"`)
		})
		for _, m := range out.Messages {
			var msg batch.Message
			_ = json.Unmarshal([]byte(aws.ToString(m.Body)), &msg)
			start := time.Now()
			ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body),
				Attributes: map[string]string{"ApproximateReceiveCount": "1"}}}}
			resp, err := app.SQSHandler(w.w)(ctx, ev)
			if err != nil || len(resp.BatchItemFailures) > 0 {
				w.t.Fatalf("Handle %s: %v %+v", msg.Kind, err, resp.BatchItemFailures)
			}
			switch msg.Kind {
			case batch.KindPlan:
				planCalls = append(planCalls, w.log.since(start)...)
			case batch.KindWork:
				if w.works == nil {
					w.works = map[string]batch.Message{}
				}
				w.works[aws.ToString(m.MessageId)] = msg // a redelivery (a slow moto) counts once
			}
			if _, err := w.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				w.t.Fatalf("delete: %v", err)
			}
		}
		b, err := w.st.Batch(ctx, w.acct, id)
		if err != nil {
			w.t.Fatalf("batch: %v", err)
		}
		if b.State == evs.StateCompleted {
			if b.Counters.Processed != b.Counters.Total-b.Counters.Duplicates {
				w.t.Fatalf("completed with counters %+v", b.Counters)
			}
			return planCalls
		}
	}
	w.t.Fatalf("batch %s did not complete", id)
	return nil
}

// TestCreateCallsDoNotGrowWithSize: creating a batch through the requests
// function makes the same few AWS calls for 10 addresses as for 50,000 —
// the input is one S3 object, the batch one record, the plan one message —
// so its time on AWS does not grow with the batch (API Gateway cuts a call
// off at 29 s).
func TestCreateCallsDoNotGrowWithSize(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t)
	_, small := w.create(10)
	_, large := w.create(50_000)
	sameCalls(t, "50,000", small, large, 10)
	t.Logf("one create, any size: %s", ops(large))
}

// sameCalls checks that a create of 10 addresses and one of size made the
// same calls, at most limit, none writing more than one item.
func sameCalls(t *testing.T, size string, small, large []call, limit int) {
	t.Helper()
	small, large = withoutRecoveryReads(small), withoutRecoveryReads(large)
	if ops(small) != ops(large) {
		t.Errorf("calls of a 10-address create: %s\ncalls of a %s-address create: %s", ops(small), size, ops(large))
		for _, c := range append(small, large...) {
			if c.attempts > 1 {
				t.Logf("retried: %s.%s, %d attempts", c.service, c.op, c.attempts)
			}
		}
	}
	if len(large) > limit {
		t.Errorf("a create made %d calls: %s", len(large), ops(large))
	}
	for _, c := range large {
		if len(c.writes) > 1 {
			t.Errorf("%s.%s wrote %d items during a create", c.service, c.op, len(c.writes))
		}
	}
}

// withoutRecoveryReads drops, for each conditional write (PutItem or
// UpdateItem) the SDK sent more than once (its reply lost on a loaded
// machine), one GetItem: the store's read of its own token that tells its
// first attempt's write from another's (dynamostore: createBatch and
// CreateUpload after a PutItem, the idempotency record's completion after
// an UpdateItem). It is what a retry costs, not what the list's size does.
func withoutRecoveryReads(cs []call) []call {
	retried := 0
	for _, c := range cs {
		if (c.op == "PutItem" || c.op == "UpdateItem") && c.attempts > 1 {
			retried++
		}
	}
	out := make([]call, 0, len(cs))
	for _, c := range cs {
		if c.op == "GetItem" && retried > 0 {
			retried--
			continue
		}
		out = append(out, c)
	}
	return out
}

// TestUploadCreateCallsDoNotGrowWithSize: a batch created from an upload
// of 1,000,000 addresses makes the same calls as one of 10 — the list
// never passes through DynamoDB, only through S3, read once and written
// once as the batch's input.
func TestUploadCreateCallsDoNotGrowWithSize(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t)
	_, small := w.createFromUpload(10)
	start := time.Now()
	id, large := w.createFromUpload(1_000_000)
	took := time.Since(start)
	sameCalls(t, "1,000,000", small, large, 16)
	// The batch's first addresses are there to work on, read from its
	// input, a domain's together although the list cycles through 50.
	items, next, err := w.st.InputItems(context.Background(), w.acct, id, 0, 3)
	if err != nil || len(items) != 3 || next != 3 || items[0].Seq != 0 || items[1].Seq != 50 || items[2].Seq != 100 || items[2].Domain != "d0.example" {
		t.Fatalf("first items of the upload's batch: %v, next %d, %v", items, next, err)
	}
	t.Logf("create from an upload of 1,000,000 addresses: %v (with -race, moto); calls: %s", took.Round(time.Millisecond), timed(large))
}

// createFromUpload makes an upload of n distinct addresses as a CSV, PUTs
// it to the pre-signed URL as a client would (no key), and creates the
// batch from it; it returns the batch's ID and the calls of the create
// alone.
func (w *scaleWorld) createFromUpload(n int) (string, []call) {
	w.t.Helper()
	call := func(resource, body string) events.APIGatewayProxyResponse {
		req := events.APIGatewayProxyRequest{
			Resource: resource, Path: resource, HTTPMethod: http.MethodPost, Body: body,
			Headers: map[string]string{"Content-Type": "application/json"},
			RequestContext: events.APIGatewayProxyRequestContext{
				RequestID: uuid.NewString(), ResourcePath: resource, HTTPMethod: http.MethodPost,
				Authorizer: map[string]any{"principalId": w.acct, "accountId": w.acct, "keyId": "k1", "testMode": "true"},
			},
		}
		resp, err := lambda.Proxy(api.Mux(api.ObserveOptions{}, w.h.MountAll(nil)))(context.Background(), req)
		if err != nil {
			w.t.Fatal(err)
		}
		return resp
	}
	resp := call("/v1/uploads", `{"contentType":"text/csv"}`)
	var up struct{ UploadID, URL string }
	if err := json.Unmarshal([]byte(resp.Body), &up); err != nil || resp.StatusCode != http.StatusCreated {
		w.t.Fatalf("create upload: %d %s", resp.StatusCode, resp.Body)
	}
	var csv strings.Builder
	csv.Grow(n * 36)
	csv.WriteString("email\n")
	for i := range n {
		fmt.Fprintf(&csv, "accepted_email+%d@d%d.example\n", i, i%50)
	}
	put, _ := http.NewRequest(http.MethodPut, up.URL, strings.NewReader(csv.String()))
	put.Header.Set("Content-Type", "text/csv")
	pr, err := http.DefaultClient.Do(put)
	if err != nil {
		w.t.Fatal(err)
	}
	io.Copy(io.Discard, pr.Body)
	pr.Body.Close()
	if pr.StatusCode != http.StatusOK {
		w.t.Fatalf("PUT to the pre-signed URL: %d", pr.StatusCode)
	}
	start := time.Now()
	resp = call("/v1/requests", `{"uploadId":"`+up.UploadID+`","mode":"quick"}`)
	return w.created(resp, n), w.log.since(start)
}

// TestBatchRunSpreadsWritesAndReadsLinearly runs two test-mode batches,
// one four times the other's size, through the worker and counts what the
// store does: no partition key takes more than rowsPerKey (250) result
// writes in the whole run — so never more than 1,000 a second, however
// fast the workers — and the planner reads grow with the batch's size,
// not with its square.
func TestBatchRunSpreadsWritesAndReadsLinearly(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t)
	// The larger takes two results keys' worth (rowsPerKey), enough to show
	// the spreading; moto's transactions slow down as a table grows.
	sizes := []int{125, 500}
	var reads []int // planner store calls per batch
	for _, n := range sizes {
		start := time.Now()
		id, _ := w.create(n)
		plan := w.drain(id)
		run := w.log.since(start)

		perKey := map[string]int{}
		for _, c := range run {
			for _, k := range c.writes {
				perKey[k]++
			}
		}
		for k, v := range perKey {
			if strings.HasPrefix(k, w.tables.Results+"/") && v > 250 {
				t.Errorf("%d addresses: results key %s took %d writes", n, k, v)
			}
		}
		batchWrites := perKey[w.tables.Batches+"/"+w.acct]
		if batchWrites > n/50+50 {
			t.Errorf("%d addresses: the account's batch partition took %d writes", n, batchWrites)
		}
		// No key takes 1,000 writes in the whole run, so none takes
		// 1,000 in a second, however fast the workers; the busiest second
		// as it went is logged.
		most, mostKey := 0, ""
		for k, v := range perKey {
			if v > most {
				most, mostKey = v, k
			}
		}
		if most > 1000 {
			t.Errorf("%d addresses: key %s took %d writes in the run", n, mostKey, most)
		}
		busiest, key := busiestSecond(run)
		t.Logf("%d addresses: at most %d writes to one key (%s) in the run, %d (%s) in one second", n, most, mostKey, busiest, key)
		read, calls := 0, 0
		for _, c := range plan {
			read += c.read
			if c.service == "DynamoDB" || c.service == "S3" {
				calls++
			}
		}
		reads = append(reads, calls)
		t.Logf("%d addresses: planner %d store calls reading %d items (%.2f per address); batch partition writes %d; busiest key-second %d (%s); all calls: %s",
			n, calls, read, float64(read)/float64(n), batchWrites, busiest, key, timed(run))
	}
	// Linear: four times the addresses, at most about four times the
	// store calls (a planner that re-reads finished rows makes about
	// sixteen times as many).
	if reads[1] > 6*max(reads[0], 1) {
		t.Errorf("planner store calls: %d for %d addresses, %d for %d: not linear", reads[0], sizes[0], reads[1], sizes[1])
	}
}

// TestLargeCSVExportRedirects: a CSV result list longer than the reply
// limit is a job, polled until it is answered 303 to a pre-signed
// download of the same CSV, which works without a key.
func TestLargeCSVExportRedirects(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t)
	id, _ := w.create(250)
	w.drain(id)
	get := func(accept string) events.APIGatewayProxyResponse {
		return w.get(w.acct, "/v1/requests/{id}/results", id, nil, map[string]string{"Accept": accept})
	}
	resp := w.ready(w.acct, "/v1/requests/{id}/results", id, nil, map[string]string{"Accept": "text/csv"})
	if resp.StatusCode != http.StatusSeeOther || resp.Headers["Location"] == "" {
		t.Fatalf("CSV of 250 results over a 4 KiB limit: %d %v %s", resp.StatusCode, resp.Headers, resp.Body)
	}
	var body struct {
		URL       string `json:"url"`
		ExpiresAt string `json:"expiresAt"`
		RequestID string `json:"requestId"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &body); err != nil || body.URL != resp.Headers["Location"] || body.ExpiresAt == "" || body.RequestID == "" {
		t.Fatalf("303 body %s: %v", resp.Body, err)
	}
	dl, err := http.Get(body.URL)
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	defer dl.Body.Close()
	csv, _ := io.ReadAll(dl.Body)
	lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	if dl.StatusCode != http.StatusOK || len(lines) != 251 || !strings.HasPrefix(lines[0], "email,status,reason") {
		t.Fatalf("download: %d, %d lines, first %q", dl.StatusCode, len(lines), lines[0])
	}
	for _, l := range lines[1:] {
		if !strings.Contains(l, ",deliverable,accepted_email,") {
			t.Fatalf("row %q", l)
		}
	}
	// JSON pages are not affected.
	if r := get("application/json"); r.StatusCode != http.StatusOK {
		t.Fatalf("JSON results: %d %s", r.StatusCode, r.Body)
	}
}

// get calls GET path (a route of the requests function, as template) of
// batch id with the query and headers, as API Gateway would for account.
func (w *scaleWorld) get(account, resource, id string, query, headers map[string]string) events.APIGatewayProxyResponse {
	w.t.Helper()
	path := strings.ReplaceAll(resource, "{id}", id)
	req := events.APIGatewayProxyRequest{
		Resource: resource, Path: path, HTTPMethod: http.MethodGet,
		PathParameters: map[string]string{"id": id}, QueryStringParameters: query, Headers: headers,
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID: uuid.NewString(), ResourcePath: resource, HTTPMethod: http.MethodGet,
			Authorizer: map[string]any{"principalId": account, "accountId": account, "keyId": "k1", "testMode": "true"},
		},
	}
	resp, err := lambda.Proxy(api.Mux(api.ObserveOptions{}, w.h.MountAll(nil)))(context.Background(), req)
	if err != nil {
		w.t.Fatalf("GET %s: %v", path, err)
	}
	checkContract(w.t, path, query, resp)
	return resp
}

// TestExportLinkOnS3: GET /v1/requests/{id}/export answers, whatever the
// CSV's size, once the job is written, a pre-signed S3 GET that serves
// with no key exactly the bytes Accept: text/csv gives for the same
// filters; another account's batch is not found.
func TestExportLinkOnS3(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t)
	id, _ := w.create(20)
	w.drain(id)
	for _, q := range []map[string]string{nil, {"status": "deliverable", "minScore": "90"}, {"status": "undeliverable"}} {
		want := w.get(w.acct, "/v1/requests/{id}/results", id, q, map[string]string{"Accept": "text/csv"})
		if want.StatusCode != http.StatusOK || !strings.HasPrefix(want.Body, "email,status,") {
			t.Fatalf("CSV %v: %d %s", q, want.StatusCode, want.Body)
		}
		resp := w.ready(w.acct, "/v1/requests/{id}/export", id, q, nil)
		var link struct {
			URL       string `json:"url"`
			ExpiresAt string `json:"expiresAt"`
			RequestID string `json:"requestId"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(resp.Body), &link) != nil || link.ExpiresAt == "" || link.RequestID == "" {
			t.Fatalf("export %v: %d %s", q, resp.StatusCode, resp.Body)
		}
		if u, err := url.Parse(link.URL); err != nil || u.Query().Get("X-Amz-Signature") == "" {
			t.Fatalf("export URL %q is not pre-signed", link.URL)
		}
		dl, err := http.Get(link.URL) // no key, no header of ours
		if err != nil {
			t.Fatalf("download: %v", err)
		}
		got, _ := io.ReadAll(dl.Body)
		dl.Body.Close()
		if dl.StatusCode != http.StatusOK || string(got) != want.Body {
			t.Fatalf("download %v: %d\n%s\nwant\n%s", q, dl.StatusCode, got, want.Body)
		}
	}
	for _, tc := range []struct {
		name, account, id string
		query             map[string]string
		status            int
	}{
		{"another account's batch", "acct-" + uuid.NewString(), id, nil, http.StatusNotFound},
		{"unknown batch", w.acct, uuid.NewString(), nil, http.StatusNotFound},
		{"bad minScore", w.acct, id, map[string]string{"minScore": "x"}, http.StatusBadRequest},
		{"unknown parameter", w.acct, id, map[string]string{"cursor": "x"}, http.StatusBadRequest},
	} {
		if r := w.get(tc.account, "/v1/requests/{id}/export", tc.id, tc.query, nil); r.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, r.StatusCode, r.Body, tc.status)
		}
	}
}
