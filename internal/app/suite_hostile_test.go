package app_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
)

// The hostile-input table: one entry per operation of api/openapi.yaml,
// saying what a hostile body gets and which bounds hold the route. A
// route added to the contract without an entry fails
// TestHostileInputCoversTheContract, so no new surface skips the
// question.

// hostileRoute is one operation's entry.
type hostileRoute struct {
	// serveOnly: AWS does not deploy the route (health, the widget, the
	// URLs `evs serve` answers itself); it is tested on `evs serve`.
	serveOnly bool
	// path makes the operation's concrete path (default: the template,
	// {id} a batch that does not exist).
	path func(t *testing.T, s *suite, acct, key string) string
	// bad are bodies the route refuses, each with the status it answers.
	bad []hostileBody
	// limit is the body limit: a body of limit+1 bytes is 413
	// payload_too_large on both deployments. 0: the route reads no body
	// (a stray one is ignored or refused by limit elsewhere), or, with
	// limitTest, its size is tested there (a 100 MiB upload).
	limit     int64
	limitTest string
	// memory says what bounds the memory a call can make the server use.
	memory string
	// heavy is the route's heavy reads, admitted per account
	// (api.Route.Heavy): "" none, "every call", or "Accept: text/csv".
	heavy string
	// ledger is what the call charges to the account's byte ledger
	// (contract, section 16): filled in with the ledger.
	ledger string
}

// hostileBody is one refused body.
type hostileBody struct {
	contentType, body string
	status            int
}

// A few hostile bodies, small enough for every route.
var (
	badJSON     = hostileBody{"application/json", `{"emails":[`, 400}
	badUTF8     = hostileBody{"application/json", "{\"email\":\"\xff@x.example\"}", 400}
	notAnObject = hostileBody{"application/json", `[1,2,3]`, 400}
	// commaRow is a CSV record longer than a record may be (1 MiB).
	commaRow = hostileBody{"text/csv", strings.Repeat(",", 1<<20+1), 400}
)

const streamedList = "one address (CSV) or JSON element at a time, one record at most 1 MiB (TestServeMemoryBoundedUnderHostileBodies)"

var hostileRoutes = map[string]hostileRoute{
	"OPTIONS /v1/verify": {memory: "reads nothing"},
	"POST /v1/verify": {limit: api.MaxVerifyBody, memory: "8 KiB body",
		bad: []hostileBody{badJSON, badUTF8, notAnObject, {"text/csv", "a@x.example", 400}}},
	"GET /v1/requests": {limit: api.MaxOtherBody, memory: "one page: at most 5 pages of batches read"},
	"POST /v1/requests": {limit: api.MaxBatchBody, memory: streamedList + "; the large-body budget on evs serve",
		bad: []hostileBody{badJSON, badUTF8, notAnObject, commaRow, {"text/csv", "\"a@x.example\n\n\nb", 400}}},
	"GET /v1/requests/{id}":         {limit: api.MaxOtherBody, memory: "one batch"},
	"GET /v1/requests/{id}/results": {limit: api.MaxOtherBody, memory: "a page, or CSV streamed a page at a time", heavy: "Accept: text/csv"},
	"GET /v1/requests/{id}/export":  {limit: api.MaxOtherBody, memory: "CSV written a page at a time", heavy: "every call"},
	"POST /v1/requests/{id}/cancel": {limit: api.MaxOtherBody, memory: "1 KiB body"},
	"GET /healthz":                  {serveOnly: true, memory: "reads nothing"},
	"GET /readyz":                   {serveOnly: true, memory: "reads nothing"},
	"GET /widget.js":                {serveOnly: true, memory: "a static file"},
	"POST /v1/outcomes": {limit: api.MaxBatchBody, memory: "CSV one record at most 1 MiB, JSON one outcome at a time, at most 50,000 kept (TestServeMemoryBoundedUnderHostileBodies); the large-body budget on evs serve",
		bad: []hostileBody{badJSON, badUTF8, notAnObject, commaRow, {"application/json", `{"outcomes":[{}` + strings.Repeat(",{}", 1000) + `]}`, 400},
			{"text/csv", "email,outcome,at\n" + strings.Repeat(",", 1<<20), 400}}},
	"DELETE /v1/outcomes":     {limit: api.MaxOtherBody, memory: "1 KiB body", bad: []hostileBody{{"application/json", `{"email":"a@x.example"}`, 400}}},
	"GET /v1/outcomes/report": {limit: api.MaxOtherBody, memory: "counts by verdict and score bucket, outcomes streamed from the store", heavy: "every call"},
	"POST /v1/outcomes/sns": {serveOnly: true, limit: api.MaxSNSBody, memory: "1 MiB body", path: snsPath,
		bad: []hostileBody{badJSON, notAnObject, {"application/json", `{"Type":"Notification"}`, 403}}},
	"POST /v1/uploads": {limit: api.MaxOtherBody, memory: "1 KiB body", bad: []hostileBody{badJSON, notAnObject}},
	"PUT /v1/uploads/{uploadId}": {serveOnly: true, path: uploadPath, limitTest: "a Content-Length over 100 MiB is refused unread (internal/server/uploads.go); too large to send here",
		memory: "streamed to disk at a minimum rate; read at creation as a list is (" + streamedList + ")"},
	"GET /v1/exports/{exportId}": {serveOnly: true, memory: "a file streamed from disk"},
}

// TestHostileInputCoversTheContract: every operation of api/openapi.yaml
// has an entry in hostileRoutes and every entry is an operation; an
// entry's heavy reads are those the route table admits per account.
func TestHostileInputCoversTheContract(t *testing.T) {
	loadContractRouter(t)
	ops := contractOperations(t)
	for _, op := range ops {
		if _, ok := hostileRoutes[op]; !ok {
			t.Errorf("%s is in api/openapi.yaml but not in hostileRoutes: add its entry (bad bodies, body limit, bounds)", op)
		}
	}
	for op := range hostileRoutes {
		if !slices.Contains(ops, op) {
			t.Errorf("hostileRoutes has %s, which api/openapi.yaml does not", op)
		}
	}
	routes := api.Routes()
	for op, e := range hostileRoutes {
		if e.memory == "" {
			t.Errorf("%s: its entry names no memory bound", op)
		}
		t.Logf("%s: memory: %s; heavy reads: %q; byte ledger: %q", op, e.memory, e.heavy, e.ledger)
		method, path, _ := strings.Cut(op, " ")
		i := slices.IndexFunc(routes, func(r api.Route) bool { return r.Path == path && slices.Contains(r.Methods, method) })
		if i < 0 {
			if e.heavy != "" {
				t.Errorf("%s: heavy reads on a route the route table does not have", op)
			}
			continue
		}
		heavy := func(accept string) bool {
			r := httptest.NewRequest(method, path, nil)
			if accept != "" {
				r.Header.Set("Accept", accept)
			}
			return routes[i].Heavy != nil && routes[i].Heavy(r)
		}
		want := map[string][2]bool{"": {false, false}, "every call": {true, true}, "Accept: text/csv": {false, true}}[e.heavy]
		if got := [2]bool{heavy(""), heavy("text/csv")}; got != want {
			t.Errorf("%s: the route table's heavy reads (plain, text/csv) are %v; its entry says %q", op, got, e.heavy)
		}
		limit := routes[i].MaxBody
		if method != http.MethodPost {
			limit = api.MaxOtherBody // no other method takes a body
		}
		if e.limit != limit {
			t.Errorf("%s: the entry's limit is %d, the route table's %d", op, e.limit, limit)
		}
	}
}

// contractOperations lists api/openapi.yaml's operations as "METHOD path".
func contractOperations(t *testing.T) []string {
	t.Helper()
	loadContractRouter(t)
	var ops []string
	for path, item := range contractSpec.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// TestSuiteHostileInput sends every route its entry's hostile bodies and
// a body a byte over its limit, on each deployment that serves it: each
// is refused with the entry's status (and the reply is the contract's,
// which checkReply checks), never a 5xx.
func TestSuiteHostileInput(t *testing.T) {
	forEachDeployment(t, suiteOptions{}, func(t *testing.T, s *suite) {
		acct, key := s.account(t, true)
		for _, op := range contractOperations(t) {
			e := hostileRoutes[op]
			if e.serveOnly && s.name != "serve" {
				continue
			}
			method, path, _ := strings.Cut(op, " ")
			p := strings.ReplaceAll(path, "{id}", "00000000-0000-0000-0000-000000000000")
			if e.path != nil {
				p = e.path(t, s, acct, key)
			}
			for _, b := range e.bad {
				r := s.do(t, key, httpCall{method: method, path: p, body: b.body, headers: map[string]string{"Content-Type": b.contentType}})
				if r.status != b.status {
					t.Errorf("%s with %.40q: %d %.300s, want %d", op, b.body, r.status, r.body, b.status)
				}
			}
			if e.limit > 0 {
				r := s.do(t, key, httpCall{method: method, path: p, body: strings.Repeat(" ", int(e.limit)+1),
					headers: map[string]string{"Content-Type": "application/json"}})
				if r.status != http.StatusRequestEntityTooLarge || errorCode(r) != evs.CodePayloadTooLarge {
					t.Errorf("%s with %d bytes, one over its limit: %d %.300s, want 413 payload_too_large", op, e.limit+1, r.status, r.body)
				}
			}
		}
	})
}

// snsPath is the account's SNS endpoint.
func snsPath(t *testing.T, s *suite, acct, _ string) string {
	sec := s.secret(t, acct)
	return "/v1/outcomes/sns?account=" + url.QueryEscape(acct) + "&token=" + url.QueryEscape(api.SNSToken(sec.Current, acct))
}

// uploadPath is a new upload's URL (its path and token).
func uploadPath(t *testing.T, s *suite, _, key string) string {
	r := s.do(t, key, httpCall{method: http.MethodPost, path: "/v1/uploads", body: `{"contentType":"text/csv"}`})
	var up struct{ URL string }
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &up) != nil {
		t.Fatalf("create upload: %d %s", r.status, r.body)
	}
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.RequestURI()
}

// errorCode is the code of an error reply's envelope.
func errorCode(r reply) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Code
}
