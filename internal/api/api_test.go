package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// These tests drive the handlers the way API Gateway does: a proxy event in
// (with the authorizer's context), a proxy response out. The store is the
// real embedded one; the engine is the test-mode sandbox, so no network is
// touched. The HTTP path through the local gateway is tested in
// internal/server.

var epoch = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// queue records the batches handed to the workers.
type queue struct {
	mu      sync.Mutex
	batches []evs.Batch
	fail    error
}

func (q *queue) Enqueue(_ context.Context, b evs.Batch) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fail != nil {
		return q.fail
	}
	q.batches = append(q.batches, b)
	return nil
}

type fixture struct {
	h     *api.Handler
	fn    lambda.ProxyHandler
	q     *queue
	clock *testkit.Clock
	seq   int
	// logs holds what the handlers logged, as JSON lines.
	logs *testkit.LogBuffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, nil)
}

// newFixtureWith is newFixture with deps adjusted by with before the
// handlers are built.
func newFixtureWith(t *testing.T, with func(*api.Deps)) *fixture {
	t.Helper()
	clock := testkit.NewClock(epoch)
	st, err := sqlitestore.Open(context.Background(), t.TempDir(), clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	q := &queue{}
	sandbox := verify.NewSandbox(clock.Now)
	logs := &testkit.LogBuffer{}
	d := api.Deps{
		Engine: sandbox, Sandbox: sandbox,
		Idempotency: idempotency.New(st, clock.Now),
		Batches:     st, Queue: q,
		Now:    clock.Now,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}
	if with != nil {
		with(&d)
	}
	h := api.New(d)
	return &fixture{h: h, fn: lambda.Proxy(api.Mux(api.ObserveOptions{Logger: d.Logger}, h.MountAll(nil))), q: q, clock: clock, logs: logs}
}

// event builds the proxy event of one call by account acct.
func (f *fixture) event(acct, method, resource string, params map[string]string, body string, headers map[string]string) events.APIGatewayProxyRequest {
	f.seq++
	path := resource
	for k, v := range params {
		path = strings.ReplaceAll(path, "{"+k+"}", v)
	}
	h := map[string]string{"Content-Type": "application/json"}
	for k, v := range headers {
		h[k] = v
	}
	return events.APIGatewayProxyRequest{
		Resource: resource, Path: path, HTTPMethod: method, Headers: h, PathParameters: params, Body: body,
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID: fmt.Sprintf("rid-%d", f.seq), ResourcePath: resource, HTTPMethod: method,
			Authorizer: map[string]any{"principalId": acct, "accountId": acct, "keyId": "k1", "testMode": "true"},
		},
	}
}

// decode checks the reply carries its call's id in the header and in the
// body, and decodes the body into v.
func decode(t *testing.T, ev events.APIGatewayProxyRequest, r events.APIGatewayProxyResponse, v any) {
	t.Helper()
	rid := ev.RequestContext.RequestID
	if r.Headers["X-Request-Id"] != rid {
		t.Fatalf("X-Request-Id = %q, want %q", r.Headers["X-Request-Id"], rid)
	}
	var ids struct {
		RequestID string `json:"requestId"`
		Error     *struct {
			RequestID string `json:"requestId"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.Body), &ids); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, r.Body)
	}
	got := ids.RequestID
	if ids.Error != nil {
		got = ids.Error.RequestID
	}
	if got != rid {
		t.Fatalf("body request id %q, want %q: %s", got, rid, r.Body)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(r.Body), v); err != nil {
			t.Fatal(err)
		}
	}
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func TestVerifyReplies(t *testing.T) {
	f := newFixture(t)
	ev := f.event("acct-1", http.MethodPost, "/v1/verify", nil, `{"email":"team+mailbox_full@x.example","mode":"quick"}`, nil)
	r, err := f.fn(context.Background(), ev)
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("verify: %d %v %s", r.StatusCode, err, r.Body)
	}
	var out struct {
		Status   string       `json:"status"`
		Decision evs.Decision `json:"decision"`
	}
	decode(t, ev, r, &out)
	if out.Status != "risky" || out.Decision.Reason != evs.ReasonMailboxFull || out.Decision.Mode != evs.ModeQuick || !out.Decision.TestMode {
		t.Fatalf("decision %+v", out)
	}
	if !strings.HasPrefix(r.Body, `{"requestId":`) || r.Headers["Content-Type"] != "application/json; charset=utf-8" {
		t.Fatalf("reply shape: %v %s", r.Headers, r.Body)
	}
}

func TestVerifyRejects(t *testing.T) {
	long := strings.Repeat("a", 510) + "@x.example"
	tests := []struct {
		name, method, body, contentType string
		base64                          bool
		status                          int
		code, message                   string
	}{
		{"get", http.MethodGet, ``, "application/json", false, 405, evs.CodeMethodNotAllowed, "use POST"},
		{"not JSON", http.MethodPost, `{"email":`, "application/json", false, 400, evs.CodeInvalidRequest, "ends too early"},
		{"array", http.MethodPost, `["a@x.example"]`, "application/json", false, 400, evs.CodeInvalidRequest, "must be a JSON object"},
		{"unknown field", http.MethodPost, `{"email":"a@x.example","fast":true}`, "application/json", false, 400, evs.CodeInvalidRequest, `unknown field "fast"`},
		{"missing email", http.MethodPost, `{"mode":"quick"}`, "application/json", false, 400, evs.CodeInvalidRequest, "is required"},
		{"empty email", http.MethodPost, `{"email":""}`, "application/json", false, 400, evs.CodeInvalidRequest, "must not be empty"},
		{"email not a string", http.MethodPost, `{"email":42}`, "application/json", false, 400, evs.CodeInvalidRequest, `"email" must be a string`},
		{"email too long", http.MethodPost, `{"email":"` + long + `"}`, "application/json", false, 400, evs.CodeInvalidRequest, "longer than 512"},
		{"bad mode", http.MethodPost, `{"email":"a@x.example","mode":"deep"}`, "application/json", false, 400, evs.CodeInvalidRequest, `"full" or "quick"`},
		{"wrong content type", http.MethodPost, `{"email":"a@x.example"}`, "text/plain", false, 400, evs.CodeInvalidRequest, "Content-Type"},
		{"body too large", http.MethodPost, `{"email":"a@x.example","pad":"` + strings.Repeat("x", api.MaxVerifyBody) + `"}`, "application/json", false, 413, evs.CodePayloadTooLarge, "larger than 8192 bytes."},
		{"bad base64", http.MethodPost, `%%%`, "application/json", true, 400, evs.CodeInvalidRequest, "base64"},
		{"trailing data", http.MethodPost, `{"email":"a@x.example"} {}`, "application/json", false, 400, evs.CodeInvalidRequest, "after the JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			ev := f.event("acct-1", tt.method, "/v1/verify", nil, tt.body, map[string]string{"Content-Type": tt.contentType})
			ev.IsBase64Encoded = tt.base64
			r, err := f.fn(context.Background(), ev)
			if err != nil || r.StatusCode != tt.status {
				t.Fatalf("status %d (%v), want %d: %s", r.StatusCode, err, tt.status, r.Body)
			}
			var e errorBody
			decode(t, ev, r, &e)
			if e.Error.Code != tt.code || !strings.Contains(e.Error.Message, tt.message) {
				t.Fatalf("error %+v, want %s containing %q", e.Error, tt.code, tt.message)
			}
			if tt.status == 405 && r.Headers["Allow"] != "POST" {
				t.Fatalf("405 without Allow: %v", r.Headers)
			}
		})
	}
}

func TestNoAuthorizerContextIsOurFault(t *testing.T) {
	f := newFixture(t)
	ev := f.event("", http.MethodPost, "/v1/verify", nil, `{"email":"a@x.example"}`, nil)
	ev.RequestContext.Authorizer = nil
	r, _ := f.fn(context.Background(), ev)
	var e errorBody
	decode(t, ev, r, &e)
	if r.StatusCode != 500 || e.Error.Code != evs.CodeInternal || strings.Contains(e.Error.Message, "authorizer") {
		t.Fatalf("%d %+v: an internal cause must not leak", r.StatusCode, e.Error)
	}
}

// An idempotent replay is the first reply rendered for the new call: the
// same status and body but for the request id, which is the new call's.
func TestVerifyIdempotentReplay(t *testing.T) {
	f := newFixture(t)
	key := map[string]string{"Idempotency-Key": "order-17"}
	first := f.event("acct-1", http.MethodPost, "/v1/verify", nil, `{"email":"accepted_email@x.example"}`, key)
	r1, _ := f.fn(context.Background(), first)
	f.clock.Advance(time.Minute) // a re-run would stamp another checkedAt
	again := f.event("acct-1", http.MethodPost, "/v1/verify", nil, ` {"email": "accepted_email@x.example"} `, key)
	r2, _ := f.fn(context.Background(), again)
	decode(t, first, r1, nil)
	decode(t, again, r2, nil)
	if r1.StatusCode != 200 || r2.StatusCode != 200 || r2.Headers["Idempotent-Replayed"] != "true" || r1.Headers["Idempotent-Replayed"] != "" {
		t.Fatalf("replay: %d %v / %d %v", r1.StatusCode, r1.Headers, r2.StatusCode, r2.Headers)
	}
	if strings.Replace(r2.Body, again.RequestContext.RequestID, first.RequestContext.RequestID, 1) != r1.Body {
		t.Fatalf("replayed body differs beyond the request id:\n%s\n%s", r1.Body, r2.Body)
	}
	// The same key for another request is refused, and an error reply is
	// stored and replayed like a success.
	other := f.event("acct-1", http.MethodPost, "/v1/verify", nil, `{"email":"someone@x.example"}`, key)
	r3, _ := f.fn(context.Background(), other)
	var e errorBody
	decode(t, other, r3, &e)
	if r3.StatusCode != 422 || e.Error.Code != evs.CodeIdempotencyKeyReused {
		t.Fatalf("reused key: %d %s", r3.StatusCode, r3.Body)
	}
	bad := map[string]string{"Idempotency-Key": "bad-1"}
	b1 := f.event("acct-1", http.MethodPost, "/v1/verify", nil, `{"email":""}`, bad)
	b2 := f.event("acct-1", http.MethodPost, "/v1/verify", nil, `{"email":""}`, bad)
	r4, _ := f.fn(context.Background(), b1)
	r5, _ := f.fn(context.Background(), b2)
	decode(t, b1, r4, nil)
	decode(t, b2, r5, nil)
	if r4.StatusCode != 400 || r5.StatusCode != 400 || r5.Headers["Idempotent-Replayed"] != "" {
		// Validation happens before the key is claimed: a bad request is
		// answered afresh each time, never stored.
		t.Fatalf("bad request: %d %d %v", r4.StatusCode, r5.StatusCode, r5.Headers)
	}
}

type envelope struct {
	Request struct {
		ID          string `json:"id"`
		Mode        string `json:"mode"`
		State       string `json:"state"`
		CompletedAt string `json:"completedAt"`
	} `json:"request"`
	Counters api.Counters `json:"counters"`
	Replayed bool         `json:"replayed"`
}

func TestBatchLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	key := map[string]string{"Idempotency-Key": "list-1"}
	body := `{"emails":["accepted_email@x.example","accepted_email@X.Example","not an address","rejected_email@x.example"],"mode":"quick"}`
	create := f.event("acct-1", http.MethodPost, "/v1/requests", nil, body, key)
	r, _ := f.fn(ctx, create)
	var env envelope
	decode(t, create, r, &env)
	if r.StatusCode != 201 || env.Request.State != "queued" || env.Counters.Total != 4 || env.Counters.Duplicates != 1 || env.Replayed {
		t.Fatalf("create: %d %s", r.StatusCode, r.Body)
	}
	if r.Headers["Location"] != "/v1/requests/"+env.Request.ID || len(f.q.batches) != 1 || f.q.batches[0].ID != env.Request.ID {
		t.Fatalf("Location %q, queued %v", r.Headers["Location"], f.q.batches)
	}
	id := map[string]string{"id": env.Request.ID}

	// Another account cannot see it.
	get := f.event("acct-2", http.MethodGet, "/v1/requests/{id}", id, "", nil)
	if r, _ := f.fn(ctx, get); r.StatusCode != 404 {
		t.Fatalf("other account: %d %s", r.StatusCode, r.Body)
	}

	// Cancel, then a replayed create answers with the batch as it is now.
	cancel := f.event("acct-1", http.MethodPost, "/v1/requests/{id}/cancel", id, "", nil)
	r, _ = f.fn(ctx, cancel)
	decode(t, cancel, r, &env)
	if r.StatusCode != 200 || env.Request.State != "cancelled" || env.Request.CompletedAt == "" {
		t.Fatalf("cancel: %d %s", r.StatusCode, r.Body)
	}
	replay := f.event("acct-1", http.MethodPost, "/v1/requests", nil, body, key)
	r, _ = f.fn(ctx, replay)
	decode(t, replay, r, &env)
	if r.StatusCode != 200 || !env.Replayed || env.Request.State != "cancelled" || r.Headers["Idempotent-Replayed"] != "true" || len(f.q.batches) != 1 {
		t.Fatalf("replayed create: %d %v %s", r.StatusCode, r.Headers, r.Body)
	}
	again := f.event("acct-1", http.MethodPost, "/v1/requests/{id}/cancel", id, "", nil)
	r, _ = f.fn(ctx, again)
	var e errorBody
	decode(t, again, r, &e)
	if r.StatusCode != 409 || e.Error.Code != evs.CodeInvalidState || !strings.Contains(e.Error.Message, "cancelled") {
		t.Fatalf("second cancel: %d %s", r.StatusCode, r.Body)
	}
}

func TestBatchRejects(t *testing.T) {
	tests := []struct {
		name, method, resource string
		params                 map[string]string
		body, contentType      string
		status                 int
		code                   string
	}{
		{"empty list", http.MethodPost, "/v1/requests", nil, `{"emails":[]}`, "application/json", 400, evs.CodeInvalidRequest},
		{"no list", http.MethodPost, "/v1/requests", nil, `{"mode":"quick"}`, "application/json", 400, evs.CodeInvalidRequest},
		{"bad mode", http.MethodPost, "/v1/requests", nil, `{"emails":["a@x.example"],"mode":"slow"}`, "application/json", 400, evs.CodeInvalidRequest},
		{"put on the list", http.MethodPut, "/v1/requests", nil, ``, "application/json", 405, evs.CodeMethodNotAllowed},
		{"list with a large body", http.MethodGet, "/v1/requests", nil, strings.Repeat("x", api.MaxOtherBody+1), "application/json", 413, evs.CodePayloadTooLarge},
		{"id not a uuid", http.MethodGet, "/v1/requests/{id}", map[string]string{"id": "42"}, ``, "application/json", 400, evs.CodeInvalidRequest},
		{"unknown batch", http.MethodGet, "/v1/requests/{id}", map[string]string{"id": "6ebae115-8db7-4321-ac14-1390d48efb10"}, ``, "application/json", 404, evs.CodeNotFound},
		{"unknown route", http.MethodGet, "/v1/requests/{id}/export", map[string]string{"id": "6ebae115-8db7-4321-ac14-1390d48efb10"}, ``, "application/json", 404, evs.CodeNotFound},
		{"cancel with a body", http.MethodPost, "/v1/requests/{id}/cancel", map[string]string{"id": "6ebae115-8db7-4321-ac14-1390d48efb10"}, `{"why":"x"}`, "application/json", 400, evs.CodeInvalidRequest},
		{"cancel with a large body", http.MethodPost, "/v1/requests/{id}/cancel", map[string]string{"id": "6ebae115-8db7-4321-ac14-1390d48efb10"}, strings.Repeat(" ", api.MaxOtherBody+1), "application/json", 413, evs.CodePayloadTooLarge},
		{"get with a large body", http.MethodGet, "/v1/requests/{id}", map[string]string{"id": "6ebae115-8db7-4321-ac14-1390d48efb10"}, strings.Repeat("x", api.MaxOtherBody+1), "application/json", 413, evs.CodePayloadTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			ev := f.event("acct-1", tt.method, tt.resource, tt.params, tt.body, map[string]string{"Content-Type": tt.contentType})
			r, err := f.fn(context.Background(), ev)
			var e errorBody
			decode(t, ev, r, &e)
			if err != nil || r.StatusCode != tt.status || e.Error.Code != tt.code {
				t.Fatalf("%d %v %s, want %d %s", r.StatusCode, err, r.Body, tt.status, tt.code)
			}
		})
	}
}

// A batch that cannot be queued is failed at once rather than left queued,
// and the client is told to retry.
func TestBatchQueueDown(t *testing.T) {
	f := newFixture(t)
	f.q.fail = evs.Wrap(fmt.Errorf("queue down"), evs.CodeUnavailable, "The queue is unavailable.")
	ev := f.event("acct-1", http.MethodPost, "/v1/requests", nil, `{"emails":["a@x.example"]}`, nil)
	r, _ := f.fn(context.Background(), ev)
	var e errorBody
	decode(t, ev, r, &e)
	if r.StatusCode != 503 || e.Error.Code != evs.CodeUnavailable || strings.Contains(r.Body, "queue down") {
		t.Fatalf("%d %s", r.StatusCode, r.Body)
	}
}

func TestResultsCSV(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ev := f.event("acct-1", http.MethodPost, "/v1/requests", nil, "email\n=cmd@x.example\n", map[string]string{"Content-Type": "text/csv"})
	r, _ := f.fn(ctx, ev)
	var env envelope
	decode(t, ev, r, &env)
	if r.StatusCode != 201 || env.Counters.Total != 1 {
		t.Fatalf("csv create: %d %s", r.StatusCode, r.Body)
	}
	// Nothing processed yet: one row per distinct address (layout=results)
	// has its header row alone, and the reply carries its id in the header
	// only.
	get := f.event("acct-1", http.MethodGet, "/v1/requests/{id}/results", map[string]string{"id": env.Request.ID}, "", map[string]string{"Accept": "text/csv"})
	get.QueryStringParameters = map[string]string{"layout": "results"}
	r, _ = f.fn(ctx, get)
	if r.StatusCode != 200 || r.Headers["Content-Type"] != "text/csv; charset=utf-8" || r.Headers["X-Request-Id"] != get.RequestContext.RequestID ||
		r.Body != "email,status,reason,suggestion,disposable,role,free,acceptAll,provider,score\n" {
		t.Fatalf("csv results: %d %v %q", r.StatusCode, r.Headers, r.Body)
	}
	// The list's own rows (the default for a CSV list) are there from the
	// start, their verdicts blank until written; the formula guard covers
	// the user's cells.
	get = f.event("acct-1", http.MethodGet, "/v1/requests/{id}/results", map[string]string{"id": env.Request.ID}, "", map[string]string{"Accept": "text/csv"})
	r, _ = f.fn(ctx, get)
	want := "email,evs_status,evs_reason,evs_suggestion,evs_disposable,evs_role,evs_free,evs_acceptAll,evs_provider,evs_score,evs_line,evs_duplicate_of_line\n" +
		"'=cmd@x.example,,,,,,,,,,2,\n"
	if r.StatusCode != 200 || r.Body != want {
		t.Fatalf("csv rows: %d %q, want %q", r.StatusCode, r.Body, want)
	}
	// A layout is for CSV replies, and one of two.
	for _, q := range []struct{ accept, layout string }{{"application/json", "rows"}, {"text/csv", "raw"}} {
		get = f.event("acct-1", http.MethodGet, "/v1/requests/{id}/results", map[string]string{"id": env.Request.ID}, "", map[string]string{"Accept": q.accept})
		get.QueryStringParameters = map[string]string{"layout": q.layout}
		if r, _ = f.fn(ctx, get); r.StatusCode != 400 {
			t.Fatalf("layout=%s with %s: %d %s", q.layout, q.accept, r.StatusCode, r.Body)
		}
	}
}
