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
	// ledger says what the call charges to the account's storage quota
	// (api.Ledger), or why it charges nothing; every entry says.
	ledger string
	// charge, when set, is a body the route charges more than 1 KiB for (a
	// long write charges a MiB part ahead):
	// under a 1 KiB quota it is 429 naming the storage quota.
	charge *hostileBody
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
	"OPTIONS /v1/verify": {memory: "reads nothing", ledger: "keeps nothing"},
	"POST /v1/verify": {limit: api.MaxVerifyBody, memory: "8 KiB body", ledger: "keeps nothing but the result cache's entry, bounded by EVS_CACHE_TTL",
		bad: []hostileBody{badJSON, badUTF8, notAnObject, {"text/csv", "a@x.example", 400}}},
	"GET /v1/requests": {limit: api.MaxOtherBody, memory: "one page: at most 5 pages of batches read", ledger: "reads only"},
	"POST /v1/requests": {limit: api.MaxBatchBody, memory: streamedList + "; the large-body budget on evs serve",
		ledger: "the list's rows and 160 B an address, before they are stored", charge: &hostileBody{"application/json", chargeList, 429},
		bad: []hostileBody{badJSON, badUTF8, notAnObject, commaRow, {"text/csv", "\"a@x.example\n\n\nb", 400}}},
	"GET /v1/requests/{id}":         {limit: api.MaxOtherBody, memory: "one batch", ledger: "reads only"},
	"GET /v1/requests/{id}/results": {limit: api.MaxOtherBody, memory: "a page, or CSV streamed a page at a time", heavy: "Accept: text/csv", ledger: "reads only (a CSV too long for a reply is an export)"},
	"GET /v1/requests/{id}/export":  {limit: api.MaxOtherBody, memory: "CSV written a page at a time", heavy: "every call", ledger: "the file, a MiB at a time as it is written (TestStoredBytesQuota, TestExportStopsBelowWatermark)"},
	"POST /v1/requests/{id}/cancel": {limit: api.MaxOtherBody, memory: "1 KiB body", ledger: "keeps nothing new"},
	"GET /healthz":                  {serveOnly: true, memory: "reads nothing", ledger: "keeps nothing"},
	"GET /readyz":                   {serveOnly: true, memory: "reads nothing", ledger: "keeps nothing"},
	"GET /widget.js":                {serveOnly: true, memory: "a static file", ledger: "keeps nothing"},
	"POST /v1/outcomes": {limit: api.MaxBatchBody, memory: "CSV one record at most 1 MiB, JSON one outcome at a time, at most 50,000 kept (TestServeMemoryBoundedUnderHostileBodies); the large-body budget on evs serve",
		bad: []hostileBody{badJSON, badUTF8, notAnObject, commaRow, {"application/json", `{"outcomes":[{}` + strings.Repeat(",{}", 1000) + `]}`, 400},
			{"text/csv", "email,outcome,at\n" + strings.Repeat(",", 1<<20), 400}},
		ledger: "640 B an outcome, all of a post before any is stored", charge: &hostileBody{"application/json", chargeOutcomes, 429}},
	"DELETE /v1/outcomes":     {limit: api.MaxOtherBody, memory: "1 KiB body", bad: []hostileBody{{"application/json", `{"email":"a@x.example"}`, 400}}, ledger: "gives back what the outcomes charged"},
	"GET /v1/outcomes/report": {limit: api.MaxOtherBody, memory: "counts by verdict and score bucket, outcomes streamed from the store", heavy: "every call", ledger: "reads only"},
	"POST /v1/outcomes/sns": {serveOnly: true, limit: api.MaxSNSBody, memory: "1 MiB body", path: snsPath,
		bad:    []hostileBody{badJSON, notAnObject, {"application/json", `{"Type":"Notification"}`, 403}},
		ledger: "as POST /v1/outcomes, with the account's live limits (TestSNSOutcomesCapped: a signed notification)"},
	"POST /v1/uploads": {limit: api.MaxOtherBody, memory: "1 KiB body", bad: []hostileBody{badJSON, notAnObject}, ledger: "keeps nothing until the PUT (on AWS the list goes to S3: at most 100 MiB, 1 hour, 10 at once per account)"},
	"PUT /v1/uploads/{uploadId}": {serveOnly: true, path: uploadPath, limitTest: "a Content-Length over 100 MiB is refused unread (internal/server/uploads.go); too large to send here",
		memory: "streamed to disk at a minimum rate; read at creation as a list is (" + streamedList + ")",
		ledger: "the list, a MiB at a time as it is written", charge: &hostileBody{"text/csv", strings.Repeat("a@x.example\n", 200), 429}},
	"GET /v1/exports/{exportId}": {serveOnly: true, memory: "a file streamed from disk", ledger: "reads only"},
}

// TestHostileInputCoversTheContract: every operation of api/openapi.yaml
// has an entry in hostileRoutes and every entry is an operation; an
// entry's heavy reads are those the route table admits per account.
func TestHostileInputCoversTheContract(t *testing.T) {
	t.Parallel()
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
		if e.memory == "" || e.ledger == "" {
			t.Errorf("%s: its entry names no memory bound or no storage charge", op)
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
	t.Parallel()
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

// Bodies that charge more than 1 KiB: ten addresses (160 B each), two
// outcomes (640 B each).
var (
	chargeList     = `{"mode":"quick","emails":["a0@x.example","a1@x.example","a2@x.example","a3@x.example","a4@x.example","a5@x.example","a6@x.example","a7@x.example","a8@x.example","a9@x.example"]}`
	chargeOutcomes = `{"outcomes":[{"email":"a@x.example","outcome":"delivered","at":"2026-11-20T10:00:00Z"},{"email":"b@x.example","outcome":"delivered","at":"2026-11-20T10:00:00Z"}]}`
)

// TestSuiteHostileLedger sends each route that keeps data its charging
// body under a 1 KiB storage quota, on each deployment that serves it:
// 429 rate_limited naming the quota, never a 5xx or a write.
func TestSuiteHostileLedger(t *testing.T) {
	t.Parallel()
	forEachDeployment(t, suiteOptions{env: map[string]string{"EVS_MAX_STORED_BYTES": "1024"}}, func(t *testing.T, s *suite) {
		acct, key := s.account(t, false)
		for _, op := range contractOperations(t) {
			e := hostileRoutes[op]
			if e.charge == nil || e.serveOnly && s.name != "serve" {
				continue
			}
			method, path, _ := strings.Cut(op, " ")
			if e.path != nil {
				path = e.path(t, s, acct, key)
			}
			r := s.do(t, key, httpCall{method: method, path: path, body: e.charge.body, headers: map[string]string{"Content-Type": e.charge.contentType}})
			if r.status != e.charge.status || errorCode(r) != "rate_limited" || !strings.Contains(string(r.body), "storage quota") {
				t.Errorf("%s over a 1 KiB storage quota: %d %.300s, want %d naming the storage quota", op, r.status, r.body, e.charge.status)
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
