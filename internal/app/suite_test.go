package app_test

// The behaviour suite: the same test functions, run over both deployments
// the composition root builds, the way internal/store's contract suite runs
// one set of tests over both stores.
//
//   - serve: `evs serve` (server.New) over SQLite and batch.LocalQueue,
//     called over HTTP on loopback with X-Api-Key.
//   - aws: the verify, requests and worker functions as app.OnAWS builds
//     them from the environment, over DynamoDB, S3 and SQS in moto; calls
//     go through the REQUEST authorizer (lambda.Authorizer) and then
//     lambda.Proxy, as API Gateway sends them, and a loop receives the
//     queue's messages and hands them to WorkerHandler, as the worker
//     function's event source does.
//
// Both are configured from one environment (suiteEnv): the engine is the
// configuration's, against a loopback DNS server and a loopback SMTP
// server, with EVS_EGRESS_ALLOW=127.0.0.0/8. The clock is the real one:
// OnAWS takes no other, so a behaviour that needs time to pass (a TTL, a
// maxAge older than a verdict) stays in a deployment's own tests.
//
// Each deployment reads an environment of its own, never the process's,
// so the suite's tests run in parallel.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/webhook"
)

// deployment is one of the two adapter sets a behaviour runs over.
type deployment interface {
	// account makes an account (test mode or live) and a key for it.
	account(t *testing.T, test bool) (acct, key string)
	// do makes one HTTP call as key, the reply checked against
	// api/openapi.yaml.
	do(t *testing.T, key string, r httpCall) reply
	// secrets is the store's webhook secrets.
	secrets() webhookSecrets
	// keys is the store's accounts and keys, to issue keys of any kind.
	keys() accountStore
}

// webhookSecrets is what webhook.Secret reads and writes.
type webhookSecrets interface {
	WebhookSecret(ctx context.Context, accountID string) (evs.WebhookSecret, error)
	PutWebhookSecret(ctx context.Context, s evs.WebhookSecret, ifCurrent string) error
}

// accountStore is what both stores offer to make a test account and key.
type accountStore interface {
	authorizer.KeyWriter
	CreateAccount(ctx context.Context, a evs.Account) error
}

// call is one HTTP request; path may carry a query.
type httpCall struct {
	method  string
	path    string
	body    string
	headers map[string]string
}

// reply is one HTTP answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// peers are the loopback DNS and SMTP servers a deployment's engine
// probes: good.example and other.example have their mail host on smtp.
type peers struct {
	dns  *testkit.DNSServer
	smtp *testkit.SMTPServer
}

// suite is what forEachDeployment gives each run.
type suite struct {
	deployment
	peers
	name string
}

// suiteOptions set what a behaviour needs of its world.
type suiteOptions struct {
	// rcpt answers RCPT TO:<addr> on the SMTP peer.
	rcpt func(addr string) string
	// env adds or overrides EVS_* settings of suiteEnv.
	env map[string]string
	// shared: the deployments share a peer whose counts the test reads,
	// so they run one after the other, not in parallel.
	shared bool
	// now is both runtimes' clock (evs serve's, and each Lambda
	// function's); nil: the real one.
	now func() time.Time
}

// forEachDeployment runs fn once per deployment, as parallel subtests
// "serve" and "aws", each over fresh peers and fresh stores.
func forEachDeployment(t *testing.T, o suiteOptions, fn func(t *testing.T, s *suite)) {
	t.Helper()
	for _, d := range []struct {
		name  string
		start func(t *testing.T, env map[string]string, now func() time.Time) deployment
	}{
		{"serve", startServe},
		{"aws", startAWS},
	} {
		t.Run(d.name, func(t *testing.T) {
			if !o.shared {
				t.Parallel()
			}
			p := startPeers(t, o.rcpt)
			env := suiteEnv(p)
			for k, v := range o.env {
				env[k] = v
			}
			now := o.now
			if now == nil {
				now = time.Now
			}
			fn(t, &suite{deployment: d.start(t, env, now), peers: p, name: d.name})
		})
	}
}

func startPeers(t *testing.T, rcpt func(string) string) peers {
	t.Helper()
	p := peers{smtp: testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: rcpt}), dns: testkit.StartDNS(t)}
	for _, rr := range []string{
		"good.example. 300 IN MX 10 mx1.good.example.",
		"mx1.good.example. 300 IN A 127.0.0.1",
		"other.example. 300 IN MX 10 mx1.good.example.",
	} {
		p.dns.AddRecord(rr)
	}
	return p
}

// suiteEnv is the configuration both deployments read: the engine probes
// the loopback peers, and may dial loopback (SMTP and webhooks).
func suiteEnv(p peers) map[string]string {
	return map[string]string{
		"EVS_SMTP":                  "direct",
		"EVS_SMTP_HELO":             "probe.evs.test",
		"EVS_SMTP_PORT":             strconv.Itoa(p.smtp.Port),
		"EVS_DNS_SERVERS":           p.dns.Addr,
		"EVS_EGRESS_ALLOW":          "127.0.0.0/8",
		"EVS_BLOCKLISTS":            "none",
		"EVS_CACHE_TTL":             "24h",
		"EVS_RATE_LIMIT":            "off",
		"EVS_PROVIDER_SESSIONS":     "4",
		"EVS_PROVIDER_RCPT_PER_MIN": "1048576",
	}
}

// makeAccount creates an account and issues it a key.
func makeAccount(t *testing.T, st accountStore, test bool) (string, string) {
	t.Helper()
	ctx := context.Background()
	a := evs.Account{ID: "acct-" + uuid.NewString(), Name: "suite-" + uuid.NewString(), Test: test, CreatedAt: time.Now().UTC()}
	if err := st.CreateAccount(ctx, a); err != nil {
		t.Fatalf("create account: %v", err)
	}
	key, err := authorizer.IssueKey(ctx, st, a.ID, "", time.Now())
	if err != nil {
		t.Fatalf("issue key: %v", err)
	}
	return a.ID, key
}

// serveDeployment is `evs serve` on loopback.
type serveDeployment struct {
	base string
	st   *sqlitestore.Store
}

func startServe(t *testing.T, env map[string]string, now func() time.Time) deployment {
	t.Helper()
	cfg, err := config.FromEnv(func(k string) string { return env[k] }, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := sqlitestore.OpenServing(ctx, t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logs := &testkit.LogBuffer{}
	srv, err := server.New(server.Options{Config: cfg, Store: st, Now: now, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("evs serve logged:\n%s", logs.String())
		}
	})
	return &serveDeployment{base: "http://" + ln.Addr().String(), st: st}
}

func (d *serveDeployment) account(t *testing.T, test bool) (string, string) {
	return makeAccount(t, d.st, test)
}

func (d *serveDeployment) secrets() webhookSecrets { return d.st }

func (d *serveDeployment) keys() accountStore { return d.st }

func (d *serveDeployment) do(t *testing.T, key string, c httpCall) reply {
	t.Helper()
	hr, err := http.NewRequest(cmpOr(c.method, http.MethodGet), d.base+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("X-Api-Key", key)
	setHeaders(hr.Header, c)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", hr.Method, c.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, body: b}
	checkReply(t, c, r)
	return r
}

func setHeaders(h http.Header, c httpCall) {
	if c.body != "" {
		h.Set("Content-Type", "application/json")
	}
	for k, v := range c.headers {
		h.Set(k, v)
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// awsDeployment is the Lambda functions as OnAWS builds them.
type awsDeployment struct {
	st        *dynamostore.Store
	authorize func(context.Context, events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error)
	verify    lambda.ProxyHandler
	requests  lambda.ProxyHandler
}

func startAWS(t *testing.T, env map[string]string, now func() time.Time) deployment {
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
	sc := testkit.SQS(t)
	q, err := sc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(testkit.UniqueName(t, "work"))})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	queueURL := aws.ToString(q.QueueUrl)
	vars := map[string]string{
		"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
		"AWS_ENDPOINT_URL": testkit.MotoEndpoint(t),
		"EVS_KEYS_TABLE":   tables.Keys, "EVS_BATCHES_TABLE": tables.Batches, "EVS_RESULTS_TABLE": tables.Results,
		"EVS_IDEMPOTENCY_TABLE": tables.Idempotency, "EVS_INPUT_BUCKET": tables.Inputs,
		"EVS_QUEUE_URL": queueURL,
	}
	for k, v := range env {
		vars[k] = v
	}
	fn := func(f app.Function) *app.AWS {
		t.Helper()
		a, err := app.OnAWSFrom(ctx, f, func(k string) string { return vars[k] }, now)
		if err != nil {
			t.Fatalf("OnAWS(%s): %v", f, err)
		}
		return a
	}
	vf, rf, wf := fn(app.VerifyFunction), fn(app.RequestsFunction), fn(app.WorkerFunction)
	vh, err := vf.VerifyHandler()
	if err != nil {
		t.Fatal(err)
	}
	rh, err := rf.RequestsHandler(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := &awsDeployment{
		st:        vf.Store,
		authorize: lambda.Authorizer(authorizer.New(vf.Store)),
		verify:    lambda.Proxy(vh), requests: lambda.Proxy(rh),
	}
	runWorker(t, sc, queueURL, wf.WorkerHandler())
	return d
}

// runWorker receives the queue's messages until the test ends and hands
// them to handler, as the worker function's event source mapping does:
// those it reports failed become visible again; the others are deleted.
func runWorker(t *testing.T, sc *sqs.Client, queueURL string, handler func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			out, err := sc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10,
				WaitTimeSeconds: 1, VisibilityTimeout: 30,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
			if err != nil || len(out.Messages) == 0 {
				continue
			}
			var ev events.SQSEvent
			handles := map[string]*string{}
			for _, m := range out.Messages {
				attrs := map[string]string{}
				for k, v := range m.Attributes {
					attrs[k] = v
				}
				ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
					Body: aws.ToString(m.Body), Attributes: attrs, EventSource: "aws:sqs"})
				handles[aws.ToString(m.MessageId)] = m.ReceiptHandle
			}
			resp, err := handler(ctx, ev)
			if err != nil {
				continue // the whole event comes back after its visibility timeout
			}
			for _, f := range resp.BatchItemFailures {
				delete(handles, f.ItemIdentifier)
			}
			for _, h := range handles {
				_, _ = sc.DeleteMessage(context.WithoutCancel(ctx), &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: h})
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func (d *awsDeployment) account(t *testing.T, test bool) (string, string) {
	return makeAccount(t, d.st, test)
}

func (d *awsDeployment) secrets() webhookSecrets { return d.st }

func (d *awsDeployment) keys() accountStore { return d.st }

// do sends c as API Gateway would: the authorizer's answer for key first,
// then the proxy event of c's route, to the function that serves it.
func (d *awsDeployment) do(t *testing.T, key string, c httpCall) reply {
	t.Helper()
	ctx := context.Background()
	method := cmpOr(c.method, http.MethodGet)
	u, err := url.Parse(c.path)
	if err != nil {
		t.Fatal(err)
	}
	resource, params := apiResource(u.Path)
	auth, err := d.authorize(ctx, events.APIGatewayCustomAuthorizerRequestTypeRequest{
		Type: "REQUEST", MethodArn: "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/" + method + u.Path,
		Headers: map[string]string{"x-api-key": key},
	})
	if err != nil {
		t.Fatalf("authorizer: %v", err)
	}
	hdr := http.Header{}
	setHeaders(hdr, c)
	ev := events.APIGatewayProxyRequest{
		Resource: resource, Path: u.Path, HTTPMethod: method, Body: c.body, PathParameters: params,
		MultiValueHeaders:               hdr,
		MultiValueQueryStringParameters: u.Query(),
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID: uuid.NewString(), Stage: "prod", ResourcePath: resource, HTTPMethod: method, Authorizer: auth.Context,
			// The client's address, as API Gateway takes it from the
			// connection: a call names it in X-Forwarded-For, which
			// `evs serve` trusts from loopback in the suite.
			Identity: events.APIGatewayRequestIdentity{SourceIP: cmpOr(hdr.Get("X-Forwarded-For"), "127.0.0.1")},
		},
	}
	serve := d.requests
	if u.Path == "/v1/verify" {
		serve = d.verify
	}
	resp, err := serve(ctx, ev)
	if err != nil {
		t.Fatalf("%s %s: %v", method, c.path, err)
	}
	header := http.Header{}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			header.Add(k, v)
		}
	}
	for k, v := range resp.Headers {
		header.Set(k, v)
	}
	if resp.IsBase64Encoded {
		t.Fatalf("%s %s: a base64 body", method, c.path)
	}
	r := reply{status: resp.StatusCode, header: header, body: []byte(resp.Body)}
	checkReply(t, c, r)
	return r
}

// apiResource is the API Gateway resource a path matches
// (template.yaml's Path of each route) and its parameters.
func apiResource(p string) (string, map[string]string) {
	rest, ok := strings.CutPrefix(p, "/v1/requests/")
	if !ok || rest == "" {
		return p, nil
	}
	id, tail, _ := strings.Cut(rest, "/")
	r := "/v1/requests/{id}"
	if tail != "" {
		r += "/" + tail
	}
	return r, map[string]string{"id": id}
}

// checkReply validates r, the reply to c, against api/openapi.yaml.
func checkReply(t *testing.T, c httpCall, r reply) {
	t.Helper()
	loadContractRouter(t)
	if r.header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s: reply without X-Request-Id", c.method, c.path)
	}
	hr, err := http.NewRequest(cmpOr(c.method, http.MethodGet), "http://evs.test"+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	setHeaders(hr.Header, c)
	route, params, err := contractRouter.FindRoute(hr)
	if err != nil {
		t.Errorf("%s %s: no route in the contract: %v", hr.Method, c.path, err)
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: hr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}}
	if err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: r.status, Header: r.header,
		Body: io.NopCloser(bytes.NewReader(r.body)), Options: in.Options,
	}); err != nil {
		t.Errorf("%s %s → %d does not match api/openapi.yaml: %v\nbody: %.500s", hr.Method, c.path, r.status, err, r.body)
	}
}

// eventually calls cond until it holds, failing the test after limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("%s: not within %v", what, limit)
		case <-tick.C:
		}
	}
}

// envelope is the part of a batch's envelope the suite reads.
type envelope struct {
	Request struct {
		ID          string `json:"id"`
		State       string `json:"state"`
		CallbackURL string `json:"callbackUrl"`
		Callback    *struct {
			State      string `json:"state"`
			Attempts   int    `json:"attempts"`
			LastStatus *int   `json:"lastStatus"`
		} `json:"callback"`
	} `json:"request"`
}

func decodeEnvelope(t *testing.T, r reply) envelope {
	t.Helper()
	var e envelope
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("envelope: %v: %s", err, r.body)
	}
	return e
}

// create posts a batch (body: the JSON request) and returns its id.
func (s *suite) create(t *testing.T, key, body string) (string, reply) {
	t.Helper()
	r := s.do(t, key, httpCall{method: http.MethodPost, path: "/v1/requests", body: body})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	return decodeEnvelope(t, r).Request.ID, r
}

// envelopeOf is GET /v1/requests/{id}.
func (s *suite) envelopeOf(t *testing.T, key, id string) envelope {
	t.Helper()
	r := s.do(t, key, httpCall{path: "/v1/requests/" + id})
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", id, r.status, r.body)
	}
	return decodeEnvelope(t, r)
}

// final waits until batch id is final, and returns its envelope.
func (s *suite) final(t *testing.T, key, id string) envelope {
	t.Helper()
	var e envelope
	eventually(t, time.Minute, "batch "+id+" final", func() bool {
		e = s.envelopeOf(t, key, id)
		switch e.Request.State {
		case "completed", "cancelled", "failed", "expired":
			return true
		}
		return false
	})
	return e
}

// results reads every result of batch id, by address.
func (s *suite) results(t *testing.T, key, id string) map[string]map[string]any {
	t.Helper()
	got := map[string]map[string]any{}
	cursor := ""
	for {
		p := s.do(t, key, httpCall{path: "/v1/requests/" + id + "/results?limit=1000" + cursor})
		var page struct {
			Results []struct {
				Email    string         `json:"email"`
				Decision map[string]any `json:"decision"`
			} `json:"results"`
			NextCursor *string `json:"nextCursor"`
		}
		if err := json.Unmarshal(p.body, &page); err != nil || p.status != http.StatusOK {
			t.Fatalf("results: %d %s", p.status, p.body)
		}
		for _, res := range page.Results {
			got[res.Email] = res.Decision
		}
		if page.NextCursor == nil {
			return got
		}
		cursor = "&cursor=" + url.QueryEscape(*page.NextCursor)
	}
}

// secret is the account's webhook signing secret.
func (s *suite) secret(t *testing.T, acct string) evs.WebhookSecret {
	t.Helper()
	sec, err := webhook.Secret(context.Background(), s.secrets(), acct)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}
