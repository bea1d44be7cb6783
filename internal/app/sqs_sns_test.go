package app_test

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
)

const sesTopic = "arn:aws:sns:us-east-1:123456789012:ses-events"

// sesWorld is a dynamostore on moto, an SES notification queue on moto's
// SQS, the loopback SNS stand-in, and the worker's SESQueue for one
// account.
type sesWorld struct {
	t    *testing.T
	ctx  context.Context
	st   *dynamostore.Store
	sqs  *sqs.Client
	url  string
	arn  string
	acct evs.Account
	sns  *testkit.SNS
	q    *app.SESQueue
	logs *testkit.LogBuffer
}

func newSESWorld(t *testing.T) *sesWorld {
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
	st := dynamostore.New(dynamostore.Config{Client: ddb, Tables: tables, Now: time.Now})
	sc := testkit.SQS(t)
	q, err := sc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(testkit.UniqueName(t, "ses"))})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	attrs, err := sc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	acct := evs.Account{ID: "acct-" + uuid.NewString(), Name: testkit.UniqueName(t, "sender"), CreatedAt: time.Now().UTC()}
	if err := st.CreateAccount(ctx, acct); err != nil {
		t.Fatal(err)
	}
	sns := testkit.StartSNS(t, testkit.SNSOptions{})
	w := &sesWorld{t: t, ctx: ctx, st: st, sqs: sc, url: aws.ToString(q.QueueUrl), arn: attrs.Attributes["QueueArn"], acct: acct, sns: sns, logs: &testkit.LogBuffer{}}
	w.q = &app.SESQueue{
		QueueARN: w.arn,
		Receiver: &api.SNSOutcomes{
			Verifier: api.NewSNSVerifier(api.HTTPCertFetcher{Client: sns.Client}, func(h string) bool { return h == sns.Host }, sns.Roots, nil),
			Topics:   []string{sesTopic},
			Store:    st,
		},
		Account: acct.Name, Accounts: st,
		Logger: slog.New(slog.NewJSONHandler(w.logs, nil)),
	}
	return w
}

// deliver puts body on the queue, as SNS delivers to a subscribed queue
// without raw message delivery, receives it back and hands the event to
// the worker's handler (routed among a work-queue record); it returns
// the SES queue's failed records.
func (w *sesWorld) deliver(body string) []events.SQSBatchItemFailure {
	w.t.Helper()
	if _, err := w.sqs.SendMessage(w.ctx, &sqs.SendMessageInput{QueueUrl: &w.url, MessageBody: &body}); err != nil {
		w.t.Fatal(err)
	}
	// A long poll can come back empty while moto serves another package's
	// calls: ask again until the message is there.
	var m types.Message
	testkit.Eventually(w.t, 30*time.Second, func() error {
		out, err := w.sqs.ReceiveMessage(w.ctx, &sqs.ReceiveMessageInput{QueueUrl: &w.url, MaxNumberOfMessages: 1, WaitTimeSeconds: 2})
		if err != nil {
			w.t.Fatalf("receive: %v", err)
		}
		if len(out.Messages) != 1 {
			return fmt.Errorf("the message sent is not on the queue: %d received", len(out.Messages))
		}
		m = out.Messages[0]
		return nil
	})
	if _, err := w.sqs.DeleteMessage(w.ctx, &sqs.DeleteMessageInput{QueueUrl: &w.url, ReceiptHandle: m.ReceiptHandle}); err != nil {
		w.t.Fatal(err)
	}
	workCalled := 0
	work := func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		workCalled++
		if len(ev.Records) != 1 || ev.Records[0].MessageId != "work-1" {
			w.t.Errorf("the work handler got %+v", ev.Records)
		}
		return events.SQSEventResponse{}, nil
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "work-1", Body: `{"kind":"sweep"}`, EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:work"},
		{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body), EventSource: "aws:sqs", EventSourceARN: w.arn},
	}}
	resp, err := w.q.Route(work)(w.ctx, ev)
	if err != nil || workCalled != 1 {
		w.t.Fatalf("route: %v, work called %d times", err, workCalled)
	}
	return resp.BatchItemFailures
}

func (w *sesWorld) outcomes(addr string) []evs.Outcome {
	w.t.Helper()
	m, err := w.st.AddressOutcomes(w.ctx, w.acct.ID, []string{addr})
	if err != nil {
		w.t.Fatal(err)
	}
	return m[addr]
}

func sesSample(t *testing.T, name, addr string) string {
	t.Helper()
	b, err := os.ReadFile("../api/testdata/ses/" + name)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), "jane@example.com", addr)
	return strings.ReplaceAll(s, "2016-01-27T14:59:38.237Z", time.Now().UTC().Add(-time.Minute).Format("2006-01-02T15:04:05.000Z"))
}

// TestSESQueue (contract, section 18, AWS): an SES notification signed as
// SNS signs it, on the queue as SNS delivers it (moto's SQS), is stored as
// the named account's outcome by the worker; the same message again is a
// duplicate; a tampered one, another topic's and one with moto's own
// (unverifiable) SNS signature are reported failed and store nothing.
func TestSESQueue(t *testing.T) {
	t.Parallel()
	w := newSESWorld(t)
	bounce := w.sns.Sign(testkit.SNSMessageFields{TopicArn: sesTopic, Message: sesSample(t, "bounce-permanent.json", "bob@good.example")})
	if f := w.deliver(string(bounce)); len(f) != 0 {
		t.Fatalf("failed: %v\nlogs: %s", f, w.logs.String())
	}
	got := w.outcomes("bob@good.example")
	if len(got) != 1 || !got[0].HardBounce() || got[0].SMTPReply != "550 5.1.1 <bob@good.example>... User" {
		t.Fatalf("stored: %+v", got)
	}
	if f := w.deliver(string(bounce)); len(f) != 0 || len(w.outcomes("bob@good.example")) != 1 {
		t.Fatalf("SNS's retry: failed %v, outcomes %d", f, len(w.outcomes("bob@good.example")))
	}
	if !strings.Contains(w.logs.String(), `"accepted":0`) {
		t.Errorf("the retry was not logged as a duplicate: %s", w.logs.String())
	}

	delivery := w.sns.Sign(testkit.SNSMessageFields{TopicArn: sesTopic, MessageID: "d1", Message: sesSample(t, "delivery.json", "ann@good.example")})
	if f := w.deliver(string(delivery)); len(f) != 0 || len(w.outcomes("ann@good.example")) != 1 {
		t.Fatalf("delivery: failed %v", f)
	}

	carol := sesSample(t, "bounce-permanent.json", "carol@good.example")
	for name, body := range map[string]string{
		"tampered":      strings.Replace(string(w.sns.Sign(testkit.SNSMessageFields{TopicArn: sesTopic, Message: carol})), "Permanent", "Transient", 1),
		"another topic": string(w.sns.Sign(testkit.SNSMessageFields{TopicArn: "arn:aws:sns:us-east-1:123456789012:other", Message: carol})),
		"not SNS":       carol,
	} {
		if f := w.deliver(body); len(f) != 1 {
			t.Errorf("%s: failed %v, want the record failed", name, f)
		}
	}
	if got := w.outcomes("carol@good.example"); len(got) != 0 {
		t.Errorf("a refused message was stored: %+v", got)
	}
	for _, line := range strings.Split(w.logs.String(), "\n") {
		if strings.Contains(line, "@good.example") {
			t.Errorf("a log line holds an address: %s", line)
		}
	}
}

// TestSESQueueMotoSNS: moto's SNS, subscribed to the queue without raw
// message delivery, delivers the SES notification in SNS's envelope; the
// worker reads that envelope, and refuses it, since moto's signature is no
// signature by SNS's certificate: a forged message stores nothing.
func TestSESQueueMotoSNS(t *testing.T) {
	t.Parallel()
	w := newSESWorld(t)
	endpoint := testkit.MotoEndpoint(t)
	call := func(form url.Values) string {
		t.Helper()
		form.Set("Version", "2010-03-31")
		req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sns/aws4_request, SignedHeaders=host, Signature=x")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("moto SNS %s: %d %s", form.Get("Action"), resp.StatusCode, b)
		}
		return string(b)
	}
	var created struct {
		TopicArn string `xml:"CreateTopicResult>TopicArn"`
	}
	if err := xml.Unmarshal([]byte(call(url.Values{"Action": {"CreateTopic"}, "Name": {testkit.UniqueName(t, "ses-events")}})), &created); err != nil || created.TopicArn == "" {
		t.Fatalf("create topic: %v", err)
	}
	call(url.Values{"Action": {"Subscribe"}, "TopicArn": {created.TopicArn}, "Protocol": {"sqs"}, "Endpoint": {w.arn},
		"Attributes.entry.1.key": {"RawMessageDelivery"}, "Attributes.entry.1.value": {"false"}})
	call(url.Values{"Action": {"Publish"}, "TopicArn": {created.TopicArn}, "Message": {sesSample(t, "bounce-permanent.json", "dan@good.example")}})
	out, err := w.sqs.ReceiveMessage(w.ctx, &sqs.ReceiveMessageInput{QueueUrl: &w.url, MaxNumberOfMessages: 1, WaitTimeSeconds: 5})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(out.Messages))
	}
	body := aws.ToString(out.Messages[0].Body)
	m, err := api.ParseSNSMessage([]byte(body))
	if err != nil || m.Type != "Notification" || m.TopicArn != created.TopicArn || !strings.Contains(m.Message, "dan@good.example") || m.Signature == "" {
		t.Fatalf("moto's envelope: %v %+v", err, m)
	}
	if _, _, err := api.SESOutcomes([]byte(m.Message), time.Now()); err != nil {
		t.Fatalf("the envelope's Message: %v", err)
	}
	w.q.Receiver.Topics = []string{created.TopicArn}
	resp := w.q.Handle(w.ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: aws.ToString(out.Messages[0].MessageId), Body: body, EventSourceARN: w.arn}}})
	if len(resp.BatchItemFailures) != 1 || len(w.outcomes("dan@good.example")) != 0 {
		t.Fatalf("moto's signature was accepted: %+v", resp)
	}
}
