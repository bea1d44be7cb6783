package app_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
)

// work runs the worker on every message the queue holds now, as the
// event source mapping would, and returns the bodies it handled.
func (w *scaleWorld) work() []string {
	w.t.Helper()
	ctx := context.Background()
	var bodies []string
	for {
		out, err := w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			w.t.Fatalf("receive: %v", err)
		}
		if len(out.Messages) == 0 {
			return bodies
		}
		for _, m := range out.Messages {
			w.handle(aws.ToString(m.Body))
			bodies = append(bodies, aws.ToString(m.Body))
			if _, err := w.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				w.t.Fatalf("delete: %v", err)
			}
		}
	}
}

// handle runs the worker on one message body, as a (re)delivery with a
// Lambda invocation's five minutes.
func (w *scaleWorld) handle(body string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", Body: body, Attributes: map[string]string{"ApproximateReceiveCount": "1"}}}}
	resp, err := app.SQSHandler(w.w)(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) > 0 {
		w.t.Fatalf("handle %s: %v %+v", body, err, resp.BatchItemFailures)
	}
}

// ready asks a CSV route as a client does: while it answers 202 it checks
// the reply, lets the worker run, and asks again. An empty receive from a
// loaded moto is not the end: it asks for up to a minute.
func (w *scaleWorld) ready(account, resource, id string, query, headers map[string]string) events.APIGatewayProxyResponse {
	w.t.Helper()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		resp := w.get(account, resource, id, query, headers)
		if resp.StatusCode != http.StatusAccepted {
			return resp
		}
		checkRunning(w.t, resp)
		w.work()
	}
	w.t.Fatalf("%s %v: still 202 after a minute of polls", resource, query)
	return events.APIGatewayProxyResponse{}
}

// checkRunning checks the 202 of an export job under way.
func checkRunning(t *testing.T, resp events.APIGatewayProxyResponse) {
	t.Helper()
	var body struct {
		State     string `json:"state"`
		RequestID string `json:"requestId"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal([]byte(resp.Body), &body) != nil || body.State != "running" || body.RequestID == "" || resp.Headers["Retry-After"] == "" {
		t.Fatalf("want 202 running with Retry-After: %d %v %s", resp.StatusCode, resp.Headers, resp.Body)
	}
}

// download GETs a pre-signed URL with no key.
func download(t *testing.T, u string) string {
	t.Helper()
	if pu, err := url.Parse(u); err != nil || pu.Query().Get("X-Amz-Signature") == "" {
		t.Fatalf("URL %q is not pre-signed", u)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// exportObjects lists the export objects of a batch in the bucket.
func (w *scaleWorld) exportObjects(id string) []string {
	w.t.Helper()
	out, err := testkit.S3(w.t).ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(w.tables.Inputs), Prefix: aws.String("exports/" + w.acct + "/" + id + "/")})
	if err != nil {
		w.t.Fatalf("list exports: %v", err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// inlineCSV is the batch's CSV under query as a handler without export
// jobs answers it, in the reply (as `evs serve` streams it): what an
// export must hold, row for row.
func (w *scaleWorld) inlineCSV(id string, query map[string]string) string {
	w.t.Helper()
	h := api.New(api.Deps{Idempotency: idempotency.New(w.st, time.Now), Batches: w.st})
	saved := w.h
	w.h = h
	defer func() { w.h = saved }()
	resp := w.get(w.acct, "/v1/requests/{id}/results", id, query, map[string]string{"Accept": "text/csv"})
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Body, "email,status,") {
		w.t.Fatalf("inline CSV %v: %d %s", query, resp.StatusCode, resp.Body)
	}
	return resp.Body
}

// TestExportJob: a CSV list over the reply limit is a job — 202 with
// Retry-After, and the same job (one message) however often the client
// asks before it is written; once the worker has run it, 303 to a
// download that holds, row for row, the CSV a reply would. A duplicated
// message writes nothing more and the job stays done. A small list is
// still answered in the reply.
func TestExportJob(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t)
	id, _ := w.create(250)
	w.drain(id)
	csvGet := func(q map[string]string) events.APIGatewayProxyResponse {
		return w.get(w.acct, "/v1/requests/{id}/results", id, q, map[string]string{"Accept": "text/csv"})
	}
	q := map[string]string{"status": "deliverable,risky", "minScore": "1"}
	mark := time.Now()
	first := csvGet(q)
	checkRunning(t, first)
	t.Logf("the ask that starts a job: %s", ops(w.log.since(mark)))
	// The same filters, written another way, on the unchanged batch.
	mark = time.Now()
	checkRunning(t, csvGet(map[string]string{"minScore": "01", "status": "risky,deliverable"}))
	t.Logf("a poll while it runs: %s", ops(w.log.since(mark)))
	mark = time.Now()
	bodies := w.work()
	t.Logf("the worker's run: %s", ops(w.log.since(mark)))
	if len(bodies) != 1 || !strings.Contains(bodies[0], `"kind":"export"`) {
		t.Fatalf("messages after two asks: %q, want one export", bodies)
	}
	mark = time.Now()
	done := csvGet(q)
	t.Logf("the poll that finds it done: %s", ops(w.log.since(mark)))
	if done.StatusCode != http.StatusSeeOther || done.Headers["Location"] == "" {
		t.Fatalf("after the worker: %d %v %s", done.StatusCode, done.Headers, done.Body)
	}
	want := w.inlineCSV(id, q)
	if got := download(t, done.Headers["Location"]); got != want {
		t.Fatalf("the export holds\n%s\nwant\n%s", got, want)
	}
	if n := strings.Count(want, "\n"); n != 251 {
		t.Fatalf("the CSV has %d lines, want 251", n)
	}
	objects := w.exportObjects(id)
	if len(objects) != 1 {
		t.Fatalf("objects after one job: %v", objects)
	}

	// The message again, as SQS may deliver it twice: nothing is written.
	since := time.Now()
	w.handle(bodies[0])
	for _, c := range w.log.since(since) {
		if c.service == "S3" {
			t.Errorf("a duplicate message called S3 %s", c.op)
		}
	}
	if again := w.exportObjects(id); len(again) != 1 || again[0] != objects[0] {
		t.Fatalf("objects after a duplicate message: %v, want %v", again, objects)
	}
	if r := csvGet(q); r.StatusCode != http.StatusSeeOther || download(t, r.Headers["Location"]) != want {
		t.Fatalf("after a duplicate message: %d %s", r.StatusCode, r.Body)
	}
	if bodies := w.work(); len(bodies) != 0 {
		t.Fatalf("a done job queued %q", bodies)
	}

	// A list that fits the reply is the reply, with no job.
	small := csvGet(map[string]string{"status": "undeliverable"})
	if small.StatusCode != http.StatusOK || small.Body != "email,status,reason,suggestion,disposable,role,free,acceptAll,provider,score\n" {
		t.Fatalf("an empty list: %d %s", small.StatusCode, small.Body)
	}
	if bodies := w.work(); len(bodies) != 0 {
		t.Fatalf("a list in the reply queued %q", bodies)
	}
}

// TestExportJobFailsThenRetries: a job the worker could not write answers
// the error envelope, 503 unavailable with Retry-After and no internal
// detail, once; asking again starts it anew, and that run is served.
func TestExportJobFailsThenRetries(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t)
	id, _ := w.create(30)
	w.drain(id)
	real := w.w.ExportCSV
	w.w.ExportCSV = func(ctx context.Context, j store.ExportJob, out io.Writer) error {
		_, _ = io.WriteString(out, "email,status\r\n")
		return errors.New("secret-internal-detail: results table unreachable")
	}
	checkRunning(t, w.get(w.acct, "/v1/requests/{id}/export", id, nil, nil))
	w.work()
	failed := w.get(w.acct, "/v1/requests/{id}/export", id, nil, nil)
	var env struct {
		Error struct{ Code, Message, RequestID string } `json:"error"`
	}
	if failed.StatusCode != http.StatusServiceUnavailable || json.Unmarshal([]byte(failed.Body), &env) != nil || env.Error.Code != "unavailable" ||
		failed.Headers["Retry-After"] == "" || strings.Contains(failed.Body, "secret") {
		t.Fatalf("a failed job: %d %v %s", failed.StatusCode, failed.Headers, failed.Body)
	}
	if objects := w.exportObjects(id); len(objects) != 0 {
		t.Fatalf("a failed job left %v", objects)
	}
	w.w.ExportCSV = real
	link := w.ready(w.acct, "/v1/requests/{id}/export", id, nil, nil)
	var body struct{ URL string }
	if link.StatusCode != http.StatusOK || json.Unmarshal([]byte(link.Body), &body) != nil {
		t.Fatalf("retry: %d %s", link.StatusCode, link.Body)
	}
	if got, want := download(t, body.URL), w.inlineCSV(id, nil); got != want {
		t.Fatalf("retried export\n%s\nwant\n%s", got, want)
	}
}

// TestExportJobCapPerAccount: an account runs at most DefaultExportJobs
// export jobs at once; one more is 429 rate_limited with Retry-After, and
// passes once the others are written.
func TestExportJobCapPerAccount(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t)
	id, _ := w.create(30)
	w.drain(id)
	filters := []map[string]string{nil, {"status": "deliverable"}, {"status": "risky"}, {"minScore": "10"}, {"minScore": "20"}}
	for _, q := range filters[:api.DefaultExportJobs] {
		checkRunning(t, w.get(w.acct, "/v1/requests/{id}/export", id, q, nil))
	}
	over := w.get(w.acct, "/v1/requests/{id}/export", id, filters[4], nil)
	if over.StatusCode != http.StatusTooManyRequests || !strings.Contains(over.Body, `"rate_limited"`) || over.Headers["Retry-After"] == "" {
		t.Fatalf("a fifth export: %d %v %s", over.StatusCode, over.Headers, over.Body)
	}
	// Asking again for a running one is no new job: still 202.
	checkRunning(t, w.get(w.acct, "/v1/requests/{id}/export", id, filters[0], nil))
	if n := len(w.work()); n != api.DefaultExportJobs {
		t.Fatalf("%d messages, want %d", n, api.DefaultExportJobs)
	}
	if r := w.ready(w.acct, "/v1/requests/{id}/export", id, filters[4], nil); r.StatusCode != http.StatusOK {
		t.Fatalf("the fifth export once the others are done: %d %s", r.StatusCode, r.Body)
	}
}

// TestExportJobPastDeadlineRestarts: a run not done by its deadline (its
// worker crashed, its message waits) is started anew by the next ask; the
// late message of the old run then writes nothing, and only the new run's
// object is served.
func TestExportJobPastDeadlineRestarts(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t)
	id, _ := w.create(30)
	w.drain(id)
	clock := testkit.NewClock(time.Now()) // the handler's: the run's deadline passes when it is moved on
	w.h = api.New(api.Deps{Idempotency: idempotency.New(w.st, time.Now), Batches: w.st, MaxCSVReply: 4 << 10, Now: clock.Now,
		ExportJobs: &api.ExportJobs{Store: w.st, Deadline: 300 * time.Millisecond, Queue: func(ctx context.Context, j store.ExportJob) error {
			return app.NewQueue(w.sqs, w.url).Send(ctx, []batch.Message{batch.ExportMessage(j)}, 0)
		}}})
	ctx := context.Background()
	// receive takes the one message an ask queued off the queue, as a
	// worker that then crashes would.
	receive := func() string {
		t.Helper()
		for range 10 {
			out, err := w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
			if err != nil || len(out.Messages) > 1 {
				t.Fatalf("receive: %v, %d messages, want 1", err, len(out.Messages))
			}
			if len(out.Messages) == 1 {
				_, _ = w.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.url), ReceiptHandle: out.Messages[0].ReceiptHandle})
				return aws.ToString(out.Messages[0].Body)
			}
		}
		t.Fatal("no message after ten receives")
		return ""
	}
	checkRunning(t, w.get(w.acct, "/v1/requests/{id}/export", id, nil, nil))
	bodies := []string{receive()}
	clock.Advance(400 * time.Millisecond)
	checkRunning(t, w.get(w.acct, "/v1/requests/{id}/export", id, nil, nil))
	bodies = append(bodies, receive())
	if bodies[0] == bodies[1] {
		t.Fatalf("the restart queued the same run: %s", bodies[0])
	}
	var newRun batch.Message
	if err := json.Unmarshal([]byte(bodies[1]), &newRun); err != nil || newRun.Export == nil {
		t.Fatalf("the new run's message %s: %v", bodies[1], err)
	}
	w.handle(bodies[0]) // the old run's message, late
	if objects := w.exportObjects(id); len(objects) != 0 {
		t.Fatalf("the replaced run wrote %v", objects)
	}
	// Read from the store, not asked: an ask now could find the new run
	// past its short deadline too, and start a third.
	if j, found, err := w.st.ExportJob(ctx, w.acct, id, ""); err != nil || !found || j.State != store.ExportRunning || j.Token != newRun.Export.Token {
		t.Fatalf("after the old run's message: %+v %v %v, want the new run still running", j, found, err)
	}
	w.handle(bodies[1])
	link := w.get(w.acct, "/v1/requests/{id}/export", id, nil, nil)
	var body struct{ URL string }
	if link.StatusCode != http.StatusOK || json.Unmarshal([]byte(link.Body), &body) != nil {
		t.Fatalf("after the new run: %d %s", link.StatusCode, link.Body)
	}
	if objects := w.exportObjects(id); len(objects) != 1 || !strings.Contains(body.URL, objects[0]) {
		t.Fatalf("objects %v, URL %s", objects, body.URL)
	}
}

// manyResults is a batch of n results made up as they are read, as the
// Results table would page them: a million rows without writing a
// million items to moto first.
type manyResults struct {
	n     int
	pages atomic.Int32
}

func (m *manyResults) Results(ctx context.Context, accountID, id string, afterSeq, limit int, status evs.Status) ([]evs.Result, error) {
	m.pages.Add(1)
	var out []evs.Result
	for seq := afterSeq + 1; seq < m.n && len(out) < limit; seq++ {
		reason := evs.ReasonAcceptedEmail
		if seq%7 == 0 {
			reason = evs.ReasonRejectedEmail
		}
		out = append(out, evs.Result{Seq: seq, Email: fmt.Sprintf("user%d@d%d.example", seq, seq%50), Decision: evs.Decision{
			Reason: reason, Flags: evs.Flags{Free: seq%3 == 0, Role: seq%11 == 0},
		}})
	}
	return out, nil
}

// TestExportMillionRows: a job of 1,000,000 rows (about 78 MB) is written
// by one worker invocation within its five minutes, a part at a time, as
// the same CSV a reply would hold; the worker's heap stays far below the
// file's size. The rows come from a made-up result reader (a million
// items written to moto first would take far longer than the export),
// the object goes to moto's S3 and the job's record to moto's DynamoDB.
//
// Not parallel: it samples the process's heap.
func TestExportMillionRows(t *testing.T) {
	const n = 1_000_000
	w := newScaleWorld(t)
	results := &manyResults{n: n}
	w.w.ExportCSV = api.ExportCSV(results, nil)
	ctx := context.Background()
	j, started, err := w.st.StartExport(ctx, store.ExportJob{AccountID: w.acct, BatchID: uuid.NewString(), Version: "completed/1000000"}, "", time.Now().Add(15*time.Minute), 4)
	if err != nil || !started {
		t.Fatalf("start: %v %v", started, err)
	}
	body, _ := json.Marshal(batch.ExportMessage(j))

	// Garbage waits for the collector until the heap doubles (GOGC=100),
	// so a sample could count a part already sent: collect early, and the
	// samples see what the export holds, not what it has let go.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	since := time.Now()
	w.handle(string(body))
	took := time.Since(since)
	close(stop)
	<-sampled

	var parts, puts int
	for _, c := range w.log.since(since) {
		switch c.op {
		case "UploadPart":
			parts++
		case "PutObject":
			puts++
		}
	}
	done, found, err := w.st.ExportJob(ctx, j.AccountID, j.BatchID, "")
	if err != nil || !found || done.State != store.ExportDone {
		t.Fatalf("after the worker: %+v %v %v", done, found, err)
	}
	// The download, hashed as it streams, against the CSV rendered again.
	resp, err := http.Get(done.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := sha256.New()
	size, err := io.Copy(got, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %d %v", resp.StatusCode, err)
	}
	want := sha256.New()
	if err := api.ExportCSV(&manyResults{n: n}, nil)(ctx, j, want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("the %d-byte object differs from the CSV", size)
	}
	growth := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("%d rows, %.1f MB: written in %v on moto in %d parts (%d PutObject), %d result pages read; heap in use grew by at most %.1f MB",
		n, float64(size)/1e6, took.Round(time.Millisecond), parts, puts, results.pages.Load(), float64(growth)/1e6)
	switch {
	// Within its five minutes: handle gives the invocation Lambda's 5 min
	// deadline, which the export's own (less a reserve) ends, failing the
	// invocation or leaving the job unfinished; it is done (above).
	case parts < 2 || puts != 0:
		t.Errorf("%d parts and %d whole puts, want a multipart upload", parts, puts)
	case growth > size/2:
		t.Errorf("the heap grew by %d bytes for a %d-byte export: not written a part at a time", growth, size)
	}
}
