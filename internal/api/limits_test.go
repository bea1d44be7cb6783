package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
)

// lambdaLimit is the requests function as functions/requests/main.go
// builds it: the body limit Lambda can always deliver.
func lambdaLimit(d *api.Deps) { d.MaxBatchBody = api.LambdaMaxBatchBody }

// paddedBatch is a valid JSON batch of one address, exactly n bytes long
// (the padding is JSON whitespace).
func paddedBatch(n int) string {
	head, tail := `{"emails":[`, `"accepted_email@x.example"]}`
	return head + strings.Repeat(" ", n-len(head)-len(tail)) + tail
}

// base64Event is the event API Gateway builds with BinaryMediaTypes */*:
// every body base64-encoded.
func base64Event(f *fixture, body string) events.APIGatewayProxyRequest {
	ev := f.event("acct-1", http.MethodPost, "/v1/requests", nil, base64.StdEncoding.EncodeToString([]byte(body)), nil)
	ev.IsBase64Encoded = true
	return ev
}

// On Lambda, batch creation takes 4 MiB and refuses one byte more with 413,
// naming the limit and POST /v1/uploads.
func TestLambdaBatchBodyLimit(t *testing.T) {
	f := newFixtureWith(t, lambdaLimit)
	ctx := context.Background()

	ev := base64Event(f, paddedBatch(api.LambdaMaxBatchBody))
	r, _ := f.fn(ctx, ev)
	var env envelope
	decode(t, ev, r, &env)
	if r.StatusCode != http.StatusCreated || env.Counters.Total != 1 {
		t.Fatalf("a body of exactly 4 MiB: %d %.300s", r.StatusCode, r.Body)
	}

	ev = base64Event(f, paddedBatch(api.LambdaMaxBatchBody+1))
	r, _ = f.fn(ctx, ev)
	var e errorBody
	decode(t, ev, r, &e)
	if r.StatusCode != http.StatusRequestEntityTooLarge || e.Error.Code != evs.CodePayloadTooLarge ||
		!strings.Contains(e.Error.Message, strconv.Itoa(api.LambdaMaxBatchBody)+" bytes") || !strings.Contains(e.Error.Message, "POST /v1/uploads") {
		t.Fatalf("4 MiB + 1: %d %s", r.StatusCode, r.Body)
	}
	if len(f.q.batches) != 1 {
		t.Fatalf("%d batches queued, want the first only", len(f.q.batches))
	}
}

// Without the Lambda setting the handler keeps the contract's 6 MiB (what
// `evs serve` runs; its gateway refuses more before reading it).
func TestDefaultBatchBodyLimit(t *testing.T) {
	f := newFixture(t)
	ev := f.event("acct-1", http.MethodPost, "/v1/requests", nil, paddedBatch(api.MaxBatchBody), nil)
	if r, _ := f.fn(context.Background(), ev); r.StatusCode != http.StatusCreated {
		t.Fatalf("6 MiB: %d %.300s", r.StatusCode, r.Body)
	}
	ev = f.event("acct-1", http.MethodPost, "/v1/requests", nil, paddedBatch(api.MaxBatchBody+1), nil)
	r, _ := f.fn(context.Background(), ev)
	var e errorBody
	decode(t, ev, r, &e)
	if r.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(e.Error.Message, strconv.Itoa(api.MaxBatchBody)+" bytes") {
		t.Fatalf("6 MiB + 1: %d %s", r.StatusCode, r.Body)
	}
}

// The arithmetic of LambdaMaxBatchBody: the largest event API Gateway can
// build around a 4 MiB body is within Lambda's 6 MiB invocation payload
// (6,291,456 bytes). The envelope's variable part is the request line and
// headers, at most 10 KiB on API Gateway; here they are made of '<', which
// Go's encoder escapes six-fold (API Gateway's does not escape it at all),
// and every header appears twice, as API Gateway sends them (headers and
// multiValueHeaders), as do the query parameters.
func TestLambdaBatchEventFitsPayloadLimit(t *testing.T) {
	const (
		lambdaPayload = 6 << 20 // bytes, request payload of a synchronous invoke
		headerBytes   = 10 << 10
	)
	f := newFixture(t)
	ev := base64Event(f, paddedBatch(api.LambdaMaxBatchBody))
	// Half the budget in one query string, half in headers of 1 KiB each.
	q := strings.Repeat("<", headerBytes/2)
	ev.Path += "?" + q
	ev.QueryStringParameters = map[string]string{"q": q}
	ev.MultiValueQueryStringParameters = map[string][]string{"q": {q}}
	ev.MultiValueHeaders = map[string][]string{}
	for i := range headerBytes / 2 / 1024 {
		v := strings.Repeat("<", 1024)
		ev.Headers["X-H"+strconv.Itoa(i)] = v
		ev.MultiValueHeaders["X-H"+strconv.Itoa(i)] = []string{v}
	}
	ev.RequestContext.Identity.UserAgent = strings.Repeat("<", 1024)
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) >= lambdaPayload {
		t.Fatalf("the event of a 4 MiB body is %d bytes, Lambda takes %d", len(b), lambdaPayload)
	}
	t.Logf("event %d bytes, %d to spare", len(b), lambdaPayload-len(b))
}
