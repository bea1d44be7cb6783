package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/testkit"
)

// The edge in front of the handlers, with fake handlers and a fake key
// lookup: what only they can do (fail, panic, echo what they got).

type fixture struct {
	g         *edge
	srv       *httptest.Server
	logs      *testkit.LogBuffer
	mu        sync.Mutex
	authCalls int
	now       time.Time
	last      *http.Request
	lastBody  []byte
	deny      map[string]bool
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// Authorize mimics the real key lookup's answers: "good*" keys resolve to
// their account, denied ones are forbidden, "boom" fails, any other key is
// unknown.
func (f *fixture) Authorize(_ context.Context, key string) (authorizer.Principal, error) {
	f.mu.Lock()
	f.authCalls++
	deny := f.deny[key]
	f.mu.Unlock()
	switch {
	case key == "boom":
		return authorizer.Principal{}, errors.New("store down")
	case !strings.HasPrefix(key, "good"):
		return authorizer.Principal{}, authorizer.ErrUnauthorized
	}
	p := authorizer.Principal{AccountID: "acct-" + key, KeyID: "k-" + key, Test: true}
	if deny {
		return p, authorizer.ErrForbidden
	}
	return p, nil
}

// echo registers a handler on every API route that tells what it got: its
// route, or by X-Mode a panic or a failure with a cause.
func (f *fixture) echo(guard api.Guard) func(*http.ServeMux) {
	return func(mux *http.ServeMux) { f.echoOn(mux, guard) }
}

func (f *fixture) echoOn(mux *http.ServeMux, guard api.Guard) {
	for _, rt := range api.Routes() {
		mux.Handle(rt.Path, guard(rt, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			f.mu.Lock()
			f.last, f.lastBody = r, body
			f.mu.Unlock()
			c := api.CallFromContext(r.Context())
			var tooBig *http.MaxBytesError
			switch {
			case errors.As(err, &tooBig):
				api.WriteError(w, api.TooLarge(rt.Path, rt.MaxBody), c.RequestID)
				return
			case r.Header.Get("X-Mode") == "panic":
				panic("handler bug")
			case r.Header.Get("X-Mode") == "error":
				c.Err = errors.New("crash")
				api.WriteError(w, c.Err, c.RequestID)
				return
			}
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "ok "+rt.Path)
		})))
	}
}

func newFixture(t *testing.T, rate float64) *fixture {
	f := &fixture{now: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), deny: map[string]bool{}, logs: &testkit.LogBuffer{}}
	o := gatewayOptions(rate, f.clock)
	o.Logger = slog.New(slog.NewJSONHandler(f.logs, nil))
	f.g = newEdge(o, f.echo, f, nil)
	f.srv = httptest.NewServer(f.g)
	t.Cleanup(f.srv.Close)
	return f
}

// gatewayOptions are the server options the gateway reads.
func gatewayOptions(rate float64, now func() time.Time) Options {
	return Options{Config: config.Config{RateLimit: rate}, Now: now, Logger: slog.New(slog.DiscardHandler)}
}

type result struct {
	status int
	header http.Header
	body   string
}

func (f *fixture) call(t *testing.T, method, path, key string, hdr map[string]string, body string) result {
	t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

func envelopeCode(t *testing.T, r result) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message, RequestID string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("not an envelope: %s", r.body)
	}
	if e.Error.RequestID == "" || e.Error.RequestID != r.header.Get("X-Request-Id") || e.Error.Message == "" {
		t.Fatalf("envelope requestId %q vs header %q: %s", e.Error.RequestID, r.header.Get("X-Request-Id"), r.body)
	}
	return e.Error.Code
}

// TestGatewayResponses: the gateway's own replies, each with one log line,
// at ERROR with the cause when the 500 has one.
// TestGatewayResponses: the edge's own refusals, and a handler's failures,
// each with one log line, at ERROR with the cause when the 500 has one.
func TestGatewayResponses(t *testing.T) {
	f := newFixture(t, 0)
	f.deny["good-denied"] = true
	cases := []struct {
		name, method, path, key string
		hdr                     map[string]string
		body                    string
		status                  int
		code                    string
		cause                   string
	}{
		{"unknown route", "GET", "/v1/unknown", "good", nil, "", 404, "not_found", ""},
		{"unknown route, no key", "GET", "/nope", "", nil, "", 404, "not_found", ""},
		{"trailing slash", "POST", "/v1/requests/", "good", nil, "", 404, "not_found", ""},
		{"doubled slash", "POST", "//v1/verify", "good", nil, "", 404, "not_found", ""},
		{"empty id", "GET", "/v1/requests//results", "good", nil, "", 404, "not_found", ""},
		{"missing key", "POST", "/v1/verify", "", nil, "", 401, "unauthorized", ""},
		{"unknown key", "POST", "/v1/verify", "bad", nil, "", 401, "unauthorized", ""},
		{"denied key", "POST", "/v1/verify", "good-denied", nil, "", 403, "forbidden", ""},
		{"authorizer failure", "POST", "/v1/verify", "boom", nil, "", 500, "internal_error", "store down"},
		{"handler panic", "POST", "/v1/verify", "good", map[string]string{"X-Mode": "panic"}, "", 500, "internal_error", "handler bug"},
		{"handler error", "POST", "/v1/verify", "good", map[string]string{"X-Mode": "error"}, "", 500, "internal_error", "crash"},
		{"body too large", "POST", "/v1/verify", "good", nil, strings.Repeat("x", api.MaxVerifyBody+1), 413, "payload_too_large", ""},
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		r := f.call(t, c.method, c.path, c.key, c.hdr, c.body)
		if r.status != c.status {
			t.Fatalf("%s: status %d, want %d: %s", c.name, r.status, c.status, r.body)
		}
		if code := envelopeCode(t, r); code != c.code {
			t.Fatalf("%s: code %q, want %q", c.name, code, c.code)
		}
		ids[i] = r.header.Get("X-Request-Id")
	}
	f.srv.Close() // every line is written
	lines := map[string][]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		rid, _ := m["requestId"].(string)
		lines[rid] = append(lines[rid], m)
	}
	for i, c := range cases {
		if len(lines[ids[i]]) != 1 {
			t.Fatalf("%s: %d log lines, want 1: %v", c.name, len(lines[ids[i]]), lines[ids[i]])
		}
		m := lines[ids[i]][0]
		wantLevel := "INFO"
		if c.cause != "" {
			wantLevel = "ERROR"
		}
		if m["status"] != float64(c.status) || m["method"] != c.method || m["level"] != wantLevel || !strings.Contains(fmt.Sprint(m["error"]), c.cause) {
			t.Errorf("%s: line %v, want status %d, %s, cause %q", c.name, m, c.status, wantLevel, c.cause)
		}
	}
}

// TestEdgeRequest: a handler behind the edge gets the principal, the path
// values, one request id (its line's and the reply's) and the body as sent.
func TestEdgeRequest(t *testing.T) {
	f := newFixture(t, 0)
	r := f.call(t, "GET", "/v1/requests/abc/results?limit=5&limit=7&status=risky", "good", map[string]string{"X-Multi": "a"}, "")
	if r.status != 200 || r.body != "ok /v1/requests/{id}/results" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	got := f.last
	if got.PathValue("id") != "abc" || got.URL.Path != "/v1/requests/abc/results" || got.URL.Query()["limit"][1] != "7" {
		t.Fatalf("path: %q %q", got.PathValue("id"), got.URL)
	}
	if rid := api.CallFromContext(got.Context()).RequestID; rid == "" || rid != r.header.Get("X-Request-Id") {
		t.Fatalf("requestId %q vs %q", rid, r.header.Get("X-Request-Id"))
	}
	if p, ok := api.PrincipalOf(got.Context()); !ok || p.AccountID != "acct-good" || p.KeyID != "k-good" || !p.Test {
		t.Fatalf("principal: %+v", p)
	}
	// Any bytes arrive as sent.
	f.call(t, "POST", "/v1/verify", "good", nil, "\xff\xfe")
	if string(f.lastBody) != "\xff\xfe" {
		t.Fatalf("binary body: %q", f.lastBody)
	}
}

// fakeVersion is a KeysVersioned store's version, moved by the test.
type fakeVersion struct {
	mu  sync.Mutex
	v   int64
	err error
}

func (f *fakeVersion) KeysVersion(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v, f.err
}

func (f *fakeVersion) set(v int64, err error) {
	f.mu.Lock()
	f.v, f.err = v, err
	f.mu.Unlock()
}

// TestAuthorizerCacheFollowsStoreVersion: with a KeysVersioned store, a
// cached answer holds only while the store's keys version is the one read
// when it was made: a change (a revocation in another process) makes the
// next call look the key up again, and a version that cannot be read
// caches nothing.
func TestAuthorizerCacheFollowsStoreVersion(t *testing.T) {
	f := newFixture(t, 0)
	ver := &fakeVersion{v: 7}
	f.g.version = ver.KeysVersion
	for i := 0; i < 3; i++ {
		if r := f.call(t, "POST", "/v1/verify", "good", nil, ""); r.status != 200 {
			t.Fatalf("call %d: %d", i, r.status)
		}
	}
	if f.authCalls != 1 {
		t.Fatalf("authorizer ran %d times with the store unchanged, want 1", f.authCalls)
	}
	f.mu.Lock()
	f.deny["good"] = true // revoked by another process...
	f.mu.Unlock()
	ver.set(8, nil) // ...which committed
	if r := f.call(t, "POST", "/v1/verify", "good", nil, ""); r.status != 403 || f.authCalls != 2 {
		t.Fatalf("after a store change: %d with %d authorizer calls, want 403 from a second call", r.status, f.authCalls)
	}
	if r := f.call(t, "POST", "/v1/verify", "good", nil, ""); r.status != 403 || f.authCalls != 2 {
		t.Fatalf("the new answer is not cached: %d, %d authorizer calls", r.status, f.authCalls)
	}
	ver.set(8, errors.New("store closed"))
	f.call(t, "POST", "/v1/verify", "good", nil, "")
	f.call(t, "POST", "/v1/verify", "good", nil, "")
	if f.authCalls != 4 {
		t.Fatalf("without a version: %d authorizer calls, want every call asked", f.authCalls)
	}
}

// TestAuthorizerCache: the authorizer runs once per key per TTL, like API
// Gateway's result cache; a denial is cached too, and expiry re-asks.
func TestAuthorizerCache(t *testing.T) {
	f := newFixture(t, 0)
	for i := 0; i < 5; i++ {
		if r := f.call(t, "POST", "/v1/verify", "good", nil, ""); r.status != 200 {
			t.Fatalf("call %d: %d", i, r.status)
		}
	}
	if f.authCalls != 1 {
		t.Fatalf("authorizer ran %d times for one key, want 1", f.authCalls)
	}
	f.mu.Lock()
	f.deny["good"] = true // revoked: the cached allow still holds
	f.mu.Unlock()
	if r := f.call(t, "GET", "/v1/requests/x", "good", nil, ""); r.status != 200 {
		t.Fatalf("within TTL: %d", r.status)
	}
	f.advance(300 * time.Second)
	if r := f.call(t, "POST", "/v1/verify", "good", nil, ""); r.status != 403 {
		t.Fatalf("after TTL: %d, want 403", r.status)
	}
	// Unauthorized answers are not cached: a key created since works.
	before := f.authCalls
	f.call(t, "POST", "/v1/verify", "bad", nil, "")
	f.call(t, "POST", "/v1/verify", "bad", nil, "")
	if f.authCalls != before+2 {
		t.Fatalf("401 was cached")
	}
}

func TestThrottle(t *testing.T) {
	f := newFixture(t, 1) // 1/s, burst 2
	var codes []int
	for i := 0; i < 3; i++ {
		codes = append(codes, f.call(t, "POST", "/v1/verify", "good", nil, "").status)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("statuses %v, want 200 200 429", codes)
	}
	r := f.call(t, "POST", "/v1/verify", "good", nil, "")
	if r.status != 429 || r.header.Get("Retry-After") != "1" || envelopeCode(t, r) != "rate_limited" {
		t.Fatalf("429: %v %s", r.header, r.body)
	}
	if r := f.call(t, "POST", "/v1/verify", "good-other", nil, ""); r.status != 200 {
		t.Fatalf("another account: %d", r.status)
	}
	f.advance(time.Second)
	if r := f.call(t, "POST", "/v1/verify", "good", nil, ""); r.status != 200 {
		t.Fatalf("after refill: %d", r.status)
	}
}

// countingReader is an endless body that counts what is read of it.
type countingReader struct{ n int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	c.n += int64(len(p))
	return len(p), nil
}

// TestBodyReadToRouteLimit: an endless body is refused after exactly the
// route's limit plus one byte.
func TestBodyReadToRouteLimit(t *testing.T) {
	f := newFixture(t, 0)
	g := newEdge(gatewayOptions(0, time.Now), f.echo, f, nil)
	for _, c := range []struct {
		method, path string
		limit        int64
	}{
		{"POST", "/v1/verify", api.MaxVerifyBody},
		{"POST", "/v1/requests", api.MaxBatchBody},
		{"POST", "/v1/requests/x/cancel", api.MaxOtherBody},
	} {
		body := &countingReader{}
		r := httptest.NewRequest(c.method, c.path, body)
		r.ContentLength = -1 // streamed: the size is not known up front
		r.Header.Set("X-Api-Key", "good")
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		// The handler's own answer: 413 naming the route's limit, and
		// for batch creation the way to send more.
		want := fmt.Sprintf("larger than %d bytes", c.limit)
		if w.Code != 413 || !strings.Contains(w.Body.String(), `"code":"payload_too_large"`) || !strings.Contains(w.Body.String(), want) ||
			strings.Contains(w.Body.String(), "/v1/uploads") != (c.path == "/v1/requests") {
			t.Fatalf("%s: %d %s", c.path, w.Code, w.Body)
		}
		if body.n > c.limit+1 {
			t.Fatalf("%s: read %d bytes of the body, limit %d", c.path, body.n, c.limit)
		}
		if w.Header().Get("Connection") != "close" {
			t.Fatalf("%s: the connection is kept for a body left unread", c.path)
		}
	}
	// A body of exactly the limit passes.
	r := httptest.NewRequest("POST", "/v1/verify", strings.NewReader(strings.Repeat("x", api.MaxVerifyBody)))
	r.Header.Set("X-Api-Key", "good")
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	if w.Code != 200 || len(f.lastBody) != api.MaxVerifyBody {
		t.Fatalf("a body at the limit: %d, %d bytes", w.Code, len(f.lastBody))
	}
}
