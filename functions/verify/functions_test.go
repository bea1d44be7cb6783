// Package main_test runs the four Lambda binaries as Lambda would: built
// with lambda.norpc, fed events through a loopback Runtime API, on DynamoDB
// and SQS served by moto. They live beside the verify function, the one
// most of them run, and build every function from functions/ (and the
// cold starts' floor, testdata/hello).
package main_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
)

// build compiles functions/name the way `make build` does (lambda.norpc),
// for the host, so the test runs the real binary; once for all the tests
// of the package (TestMain removes the binaries).
func build(t testing.TB, name string) string {
	t.Helper()
	return builds.Build(t, name, func(out string) *exec.Cmd {
		cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-o", out, "./"+name)
		cmd.Dir = ".." // functions/
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		return cmd
	})
}

// builds holds the functions' binaries, built once for the package.
var builds testkit.Builds

// TestMain removes the binaries the tests built, and stops the
// moto_server a test started, if any.
func TestMain(m *testing.M) {
	code := testkit.MotoMain(m)
	builds.Remove()
	os.Exit(code)
}

type awsWorld struct {
	endpoint string
	tables   dynamostore.Tables
	queueURL string
	st       *dynamostore.Store
	sqs      *sqs.Client
}

func newAWSWorld(t testing.TB) *awsWorld {
	t.Helper()
	ctx := context.Background()
	w := &awsWorld{endpoint: testkit.MotoEndpoint(t)}
	w.tables = dynamostore.Tables{
		Keys: testkit.UniqueName(t, "keys"), Batches: testkit.UniqueName(t, "batches"),
		Results: testkit.UniqueName(t, "results"), Idempotency: testkit.UniqueName(t, "idem"),
	}
	ddb := testkit.DynamoDB(t)
	if err := dynamostore.CreateTables(ctx, ddb, w.tables); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	w.tables.Inputs = testkit.Bucket(t, testkit.S3(t))
	w.st = dynamostore.New(dynamostore.Config{Client: ddb, Objects: testkit.S3(t), Tables: w.tables, Now: time.Now})
	w.sqs = testkit.SQS(t)
	q, err := w.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(testkit.UniqueName(t, "work"))})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	w.queueURL = aws.ToString(q.QueueUrl)
	return w
}

// start runs a function binary against the test's Runtime API and moto;
// env entries ("NAME=value") are added last, so they win over the defaults.
func (w *awsWorld) start(t *testing.T, bin string, env ...string) *testkit.Runtime {
	t.Helper()
	rt, _ := w.run(t, bin, env...)
	return rt
}

// run is start, and also returns a function that ends the process (which
// the test's end does anyway).
func (w *awsWorld) run(t testing.TB, bin string, env ...string) (*testkit.Runtime, func()) {
	t.Helper()
	rt, _, stop := w.runLogged(t, bin, env...)
	return rt, stop
}

// runLogged is run, and also returns what the process writes (its log
// lines and EMF metrics), which may be read while it runs.
func (w *awsWorld) runLogged(t testing.TB, bin string, env ...string) (*testkit.Runtime, *testkit.LogBuffer, func()) {
	t.Helper()
	rt := testkit.StartRuntime(t)
	cmd := exec.Command(bin)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"AWS_LAMBDA_RUNTIME_API=" + rt.Addr,
		"AWS_LAMBDA_FUNCTION_NAME=evs-test",
		"AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL=" + w.endpoint,
		"EVS_KEYS_TABLE=" + w.tables.Keys, "EVS_BATCHES_TABLE=" + w.tables.Batches,
		"EVS_RESULTS_TABLE=" + w.tables.Results, "EVS_IDEMPOTENCY_TABLE=" + w.tables.Idempotency, "EVS_INPUT_BUCKET=" + w.tables.Inputs,
		"EVS_QUEUE_URL=" + w.queueURL,
		"EVS_SMTP_HELO=probe.evs.test",
		"EVS_DNS_SERVERS=127.0.0.1:9", // nothing answers: test mode never asks
	}
	cmd.Env = append(cmd.Env, env...)
	logs := new(testkit.LogBuffer)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(bin), logs.String())
		}
	})
	return rt, logs, stop
}

func (w *awsWorld) seedKey(t *testing.T, test bool) (string, evs.Account) {
	t.Helper()
	ctx := context.Background()
	a := evs.Account{ID: "acct-" + testkit.UniqueName(t, "a"), Name: testkit.UniqueName(t, "name"), Test: test, CreatedAt: time.Now().UTC()}
	if err := w.st.CreateAccount(ctx, a); err != nil {
		t.Fatal(err)
	}
	key, err := authorizer.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	h := authorizer.HashKey(key)
	if err := w.st.CreateKey(ctx, evs.Key{ID: authorizer.KeyID(h), Hash: h, AccountID: a.ID, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	return key, a
}

func proxyEvent(method, resource, path string, params map[string]string, acct evs.Account, body string) events.APIGatewayProxyRequest {
	test := "false"
	if acct.Test {
		test = "true"
	}
	return events.APIGatewayProxyRequest{
		Resource: resource, Path: path, HTTPMethod: method,
		Headers:        map[string]string{"Content-Type": "application/json"},
		PathParameters: params,
		Body:           body,
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID: "req-" + method + "-" + resource, Stage: "prod", ResourcePath: resource, HTTPMethod: method,
			Authorizer: map[string]any{"principalId": acct.ID, "accountId": acct.ID, "keyId": "k", "testMode": test},
		},
	}
}

// TestLambdaBinaries runs the real authorizer, verify, requests and worker
// binaries through the Lambda Runtime API, on DynamoDB and SQS in moto.
func TestLambdaBinaries(t *testing.T) {
	w := newAWSWorld(t)
	key, acct := w.seedKey(t, true)

	t.Run("authorizer", func(t *testing.T) {
		rt := w.start(t, build(t, "authorizer"))
		ev := events.APIGatewayCustomAuthorizerRequestTypeRequest{
			Type: "REQUEST", MethodArn: "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/POST/v1/verify",
			Headers: map[string]string{"x-api-key": key},
		}
		out, err := rt.Invoke(ev, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayCustomAuthorizerResponse
		if err := json.Unmarshal(out.Response, &resp); err != nil || out.Error != nil {
			t.Fatalf("authorizer reply %s / error %s", out.Response, out.Error)
		}
		st := resp.PolicyDocument.Statement
		if resp.PrincipalID != authorizer.KeyID(authorizer.HashKey(key)) || len(st) != 1 || st[0].Effect != "Allow" || st[0].Resource[0] != "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/*/*" {
			t.Fatalf("policy: %+v", resp)
		}
		if resp.Context["accountId"] != acct.ID || resp.Context["testMode"] != "true" {
			t.Fatalf("context: %v", resp.Context)
		}
		ev.Headers["x-api-key"] = "evs." + strings.Repeat("A", 43)
		out, err = rt.Invoke(ev, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out.Error), "Unauthorized") {
			t.Fatalf("unknown key: response %s error %s", out.Response, out.Error)
		}

		// The warm function keeps no cache of its own: a key revoked
		// between two invocations is denied by the second. On AWS a
		// revocation then waits only for API Gateway's authorizer cache
		// (template.yaml, ReauthorizeEvery; see TestRevocationWithin60s).
		revoked, _ := w.seedKey(t, true)
		ev.Headers["x-api-key"] = revoked
		effect := func() string {
			t.Helper()
			out, err := rt.Invoke(ev, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var resp events.APIGatewayCustomAuthorizerResponse
			if err := json.Unmarshal(out.Response, &resp); err != nil || out.Error != nil || len(resp.PolicyDocument.Statement) != 1 {
				t.Fatalf("authorizer reply %s / error %s", out.Response, out.Error)
			}
			return resp.PolicyDocument.Statement[0].Effect
		}
		if e := effect(); e != "Allow" {
			t.Fatalf("before revocation: %s", e)
		}
		if _, err := w.st.RevokeKey(context.Background(), authorizer.KeyID(authorizer.HashKey(revoked)), time.Now()); err != nil {
			t.Fatal(err)
		}
		if e := effect(); e != "Deny" {
			t.Fatalf("right after revocation: %s, want Deny", e)
		}
	})

	t.Run("verify", func(t *testing.T) {
		rt := w.start(t, build(t, "verify"))
		out, err := rt.Invoke(proxyEvent("POST", "/v1/verify", "/v1/verify", nil, acct, `{"email":"team+rejected-email@x.example"}`), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayProxyResponse
		if err := json.Unmarshal(out.Response, &resp); err != nil {
			t.Fatalf("reply %s / error %s", out.Response, out.Error)
		}
		var body struct {
			Status    string `json:"status"`
			RequestID string `json:"requestId"`
			Decision  struct {
				Reason   string `json:"reason"`
				TestMode bool   `json:"testMode"`
			} `json:"decision"`
		}
		if err := json.Unmarshal([]byte(resp.Body), &body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, resp.Body)
		}
		if body.Status != "undeliverable" || body.Decision.Reason != "rejected_email" || !body.Decision.TestMode || body.RequestID != "req-POST-/v1/verify" || resp.Headers["X-Request-Id"] != body.RequestID {
			t.Fatalf("reply: %s %v", resp.Body, resp.Headers)
		}
	})

	t.Run("batch through SQS", func(t *testing.T) {
		requests := w.start(t, build(t, "requests"))
		worker := w.start(t, build(t, "worker"))
		emails := `["accepted_email@x.example","rejected_email@y.example","mailbox_full@x.example","accepted_email@x.example","a@z.example"]`
		out, err := requests.Invoke(proxyEvent("POST", "/v1/requests", "/v1/requests", nil, acct, `{"emails":`+emails+`,"mode":"quick"}`), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayProxyResponse
		_ = json.Unmarshal(out.Response, &resp)
		if resp.StatusCode != 201 {
			t.Fatalf("create: %s %s", out.Response, out.Error)
		}
		var env struct {
			Request struct{ ID, State string } `json:"request"`
		}
		_ = json.Unmarshal([]byte(resp.Body), &env)

		// Deliver the first messages twice: redelivery must not count twice.
		feedWorker(t, w, worker, acct.ID, env.Request.ID, true)
		out, err = requests.Invoke(proxyEvent("GET", "/v1/requests/{id}", "/v1/requests/"+env.Request.ID, map[string]string{"id": env.Request.ID}, acct, ""), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(out.Response, &resp)
		var got struct {
			Request  struct{ State string } `json:"request"`
			Counters struct {
				Total, Duplicates, Processed, Deliverable, Undeliverable, Risky, Unknown int
			} `json:"counters"`
		}
		_ = json.Unmarshal([]byte(resp.Body), &got)
		c := got.Counters
		// a@z.example names no outcome: in quick mode a test key answers it
		// as a live key would, unknown/mailbox_not_checked.
		if got.Request.State != "completed" || c.Total != 5 || c.Duplicates != 1 || c.Processed != 4 || c.Deliverable != 1 || c.Undeliverable != 1 || c.Risky != 1 || c.Unknown != 1 {
			t.Fatalf("after the worker: %s", resp.Body)
		}

		// GET /v1/requests reads the batch index: a second batch comes
		// first, and pages of one end with a null cursor.
		out, err = requests.Invoke(proxyEvent("POST", "/v1/requests", "/v1/requests", nil, acct, `{"emails":["b@x.example"],"mode":"quick"}`), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(out.Response, &resp)
		var second struct {
			Request struct{ ID string } `json:"request"`
		}
		if err := json.Unmarshal([]byte(resp.Body), &second); err != nil || resp.StatusCode != 201 {
			t.Fatalf("second create: %s %s", out.Response, out.Error)
		}
		var listed []string
		cursor := ""
		for page := 0; page < 3; page++ {
			ev := proxyEvent("GET", "/v1/requests", "/v1/requests", nil, acct, "")
			ev.QueryStringParameters = map[string]string{"limit": "1"}
			if cursor != "" {
				ev.QueryStringParameters["cursor"] = cursor
			}
			out, err = requests.Invoke(ev, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal(out.Response, &resp)
			var list struct {
				Requests []struct {
					Request struct{ ID, State string } `json:"request"`
				} `json:"requests"`
				NextCursor *string `json:"nextCursor"`
			}
			if err := json.Unmarshal([]byte(resp.Body), &list); err != nil || resp.StatusCode != 200 || len(list.Requests) != 1 {
				t.Fatalf("list page %d: %d %s %s", page, resp.StatusCode, resp.Body, out.Error)
			}
			listed = append(listed, list.Requests[0].Request.ID+" "+list.Requests[0].Request.State)
			if list.NextCursor == nil {
				break
			}
			cursor = *list.NextCursor
		}
		want := []string{second.Request.ID + " queued", env.Request.ID + " completed"}
		if strings.Join(listed, ",") != strings.Join(want, ",") {
			t.Fatalf("GET /v1/requests listed %q, want %q", listed, want)
		}
	})
}

// initOutput runs a function binary as w.start does, with env added last,
// expecting its init to fail: it returns the exit code and what it logged.
func (w *awsWorld) initOutput(t *testing.T, bin string, env ...string) (int, string) {
	t.Helper()
	rt := testkit.StartRuntime(t)
	cmd := exec.Command(bin)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"AWS_LAMBDA_RUNTIME_API=" + rt.Addr,
		"AWS_LAMBDA_FUNCTION_NAME=evs-test",
		"AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL=" + w.endpoint,
		"EVS_KEYS_TABLE=" + w.tables.Keys, "EVS_BATCHES_TABLE=" + w.tables.Batches,
		"EVS_RESULTS_TABLE=" + w.tables.Results, "EVS_IDEMPOTENCY_TABLE=" + w.tables.Idempotency, "EVS_INPUT_BUCKET=" + w.tables.Inputs,
		"EVS_QUEUE_URL=" + w.queueURL,
		"EVS_SMTP_HELO=probe.evs.test",
		"EVS_DNS_SERVERS=127.0.0.1:9",
	}, env...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s kept running with a missing resource:\n%s", filepath.Base(bin), logs.String())
	}
	return cmd.ProcessState.ExitCode(), logs.String()
}

// TestColdStartNamesMissingResources: a function whose table or queue does
// not exist fails its cold start with one log line that names the
// resource, its variable and the fix, rather than answering "unavailable"
// on every call.
func TestColdStartNamesMissingResources(t *testing.T) {
	w := newAWSWorld(t)
	cases := []struct {
		fn   string
		env  string
		want string
	}{
		{"authorizer", "EVS_KEYS_TABLE=nope", `DynamoDB table \"nope\" (EVS_KEYS_TABLE) does not exist in region us-east-1`},
		{"verify", "EVS_IDEMPOTENCY_TABLE=nope", `DynamoDB table \"nope\" (EVS_IDEMPOTENCY_TABLE) does not exist`},
		{"requests", "EVS_QUEUE_URL=" + w.queueURL + "-nope", "SQS queue " + w.queueURL + "-nope (EVS_QUEUE_URL) does not exist"},
		{"worker", "EVS_RESULTS_TABLE=nope", `DynamoDB table \"nope\" (EVS_RESULTS_TABLE) does not exist`},
	}
	for _, c := range cases {
		t.Run(c.fn, func(t *testing.T) {
			code, logs := w.initOutput(t, build(t, c.fn), c.env)
			var lines []string
			for _, l := range strings.Split(logs, "\n") {
				if strings.Contains(l, "init failed") {
					lines = append(lines, l)
				}
			}
			if code != 1 || len(lines) != 1 || !strings.Contains(lines[0], c.want) || !strings.Contains(lines[0], "sam deploy") {
				t.Fatalf("exit %d; want 1 and one init line with %q:\n%s", code, c.want, logs)
			}
		})
	}
}

// verifyOn calls POST /v1/verify with body on the verify function's
// runtime rt as acct, fails t unless it answers 200, decodes the reply
// into v and returns it as sent.
func verifyOn(t *testing.T, rt *testkit.Runtime, acct evs.Account, body string, timeout time.Duration, v any) string {
	t.Helper()
	out, err := rt.Invoke(proxyEvent("POST", "/v1/verify", "/v1/verify", nil, acct, body), timeout)
	if err != nil {
		t.Fatal(err)
	}
	var resp events.APIGatewayProxyResponse
	if err := json.Unmarshal(out.Response, &resp); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: reply %s / error %s", body, out.Response, out.Error)
	}
	if err := json.Unmarshal([]byte(resp.Body), v); err != nil {
		t.Fatalf("%s: %v in %s", body, err, resp.Body)
	}
	return resp.Body
}
