// Package api holds the HTTP handlers of the v1 API on the standard mux's
// method-and-path patterns. `evs serve` puts them behind its own middleware
// (key check, throttling, body budget); each Lambda function reaches them
// through the API Gateway adapter (internal/lambda).
//
// Every reply carries the call's requestId in the body and in X-Request-Id.
// Errors are classified once, here at the edge, into the contract's
// envelope.
package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/verify"
)

// Function names: the logical ids of the Lambda functions in template.yaml.
const (
	VerifyFunction   = "VerifyFunction"
	RequestsFunction = "RequestsFunction"
)

// Route is one path of the API and the function that serves it. Methods are
// the ones the handler accepts; it answers every other method with 405, so
// a wrong method is told apart from an unknown path.
type Route struct {
	Path     string
	Methods  []string
	Function string
	MaxBody  int64 // the largest request body the route accepts, in bytes
	// Heavy, when set, tells which calls of the route are heavy reads,
	// admitted a bounded number at once per account (readgate.go).
	Heavy func(*http.Request) bool
}

// MaxOtherBody is the body limit of the routes that take no body: a stray
// newline is tolerated, a payload is not read.
const MaxOtherBody = 1 << 10

// TooLarge is the 413 of a body over the route's limit of limit bytes.
func TooLarge(path string, limit int64) error {
	if path == "/v1/requests" {
		return evs.Errorf(evs.CodePayloadTooLarge, "The request body is larger than %d bytes; send large lists with POST /v1/uploads.", limit)
	}
	return evs.Errorf(evs.CodePayloadTooLarge, "The request body is larger than %d bytes.", limit)
}

// Routes is the one route table of the API, checked against template.yaml
// by a test. Its limits are `evs serve`'s (on Lambda, see
// LambdaMaxBatchBody).
func Routes() []Route {
	return []Route{
		{Path: "/v1/verify", Methods: []string{http.MethodPost}, Function: VerifyFunction, MaxBody: MaxVerifyBody},
		{Path: "/v1/requests", Methods: []string{http.MethodGet, http.MethodPost}, Function: RequestsFunction, MaxBody: MaxBatchBody},
		{Path: "/v1/requests/{id}", Methods: []string{http.MethodGet}, Function: RequestsFunction, MaxBody: MaxOtherBody},
		{Path: "/v1/requests/{id}/results", Methods: []string{http.MethodGet}, Function: RequestsFunction, MaxBody: MaxOtherBody, Heavy: asksCSV},
		{Path: "/v1/requests/{id}/export", Methods: []string{http.MethodGet}, Function: RequestsFunction, MaxBody: MaxOtherBody, Heavy: everyCall},
		{Path: "/v1/requests/{id}/cancel", Methods: []string{http.MethodPost}, Function: RequestsFunction, MaxBody: MaxOtherBody},
		{Path: "/v1/uploads", Methods: []string{http.MethodPost}, Function: RequestsFunction, MaxBody: MaxOtherBody},
		{Path: "/v1/outcomes", Methods: []string{http.MethodPost, http.MethodDelete}, Function: RequestsFunction, MaxBody: MaxBatchBody},
		{Path: "/v1/outcomes/report", Methods: []string{http.MethodGet}, Function: RequestsFunction, MaxBody: MaxOtherBody, Heavy: everyCall},
	}
}

// Verifier decides on one inspected address (verify.Inspect). The live
// engine and the test-mode sandbox both implement it.
type Verifier interface {
	Verify(ctx context.Context, in verify.Inspection, mode evs.Mode) evs.Decision
}

// Queue hands a newly created batch to the workers. The batch and its items
// are already stored when Enqueue is called.
type Queue interface {
	Enqueue(ctx context.Context, b evs.Batch) error
}

// ItemsQueue is a Queue in this process that takes the items just stored
// with the batch, so its workers need not read them back. The items must
// not be changed after.
type ItemsQueue interface {
	EnqueueItems(ctx context.Context, b evs.Batch, items []evs.Item) error
}

// BatchStore is the part of the store the batch handlers use.
type BatchStore interface {
	CreateBatchWithin(ctx context.Context, b evs.Batch, items []evs.Item, maxActive int) error
	Batch(ctx context.Context, accountID, id string) (evs.Batch, error)
	TransitionBatch(ctx context.Context, accountID, id string, from []evs.State, to evs.State, errMsg string, now time.Time) (evs.Batch, error)
	Results(ctx context.Context, accountID, id string, afterSeq, limit int, status evs.Status) ([]evs.Result, error)
	ListBatches(ctx context.Context, accountID string, after evs.BatchPos, limit int) ([]evs.Batch, error)
	FirstPending(ctx context.Context, accountID, id string, after, upTo int) (int, error)
}

// ResultCache reuses an account's live verdicts. maxAge bounds the age of
// a reused verdict: 0 for no bound, evs.NoReuse to reuse none.
type ResultCache interface {
	Lookup(ctx context.Context, accountID string, mode evs.Mode, normalized, email string, maxAge time.Duration) (evs.Decision, bool)
	Keep(ctx context.Context, accountID string, ds ...evs.Decision) error
}

// Deps are the handlers' dependencies.
type Deps struct {
	Engine      Verifier // for live accounts
	Sandbox     Verifier // for test-mode accounts
	Cache       ResultCache
	Idempotency *idempotency.Keeper // wraps every POST
	Batches     BatchStore
	Queue       Queue
	// MaxBatchBody is the largest body batch creation accepts, in bytes
	// (default MaxBatchBody; LambdaMaxBatchBody on AWS).
	MaxBatchBody int64
	// ExportJobs, when set (AWS), makes a CSV result list longer than
	// MaxCSVReply (default 4 MiB), and every export, a job the worker
	// writes to S3 (exportjobs.go): Lambda cannot reply over 6 MB, nor API
	// Gateway wait past 29 s. Nil streams every list.
	ExportJobs  *ExportJobs
	MaxCSVReply int
	// ExportLinks, when set (`evs serve`), writes exports in the call.
	// Without either, the export route is 404.
	ExportLinks Exports
	// HeavyReads bounds the heavy reads (Route.Heavy) run at once, at
	// most HeavyReadsPerAccount per account; 0 bounds nothing.
	HeavyReads int
	// Uploads keeps lists sent with POST /v1/uploads (nil: none).
	// PublicURL is the API's origin (EVS_PUBLIC_URL), "" for each call's.
	Uploads   Uploads
	PublicURL string
	// ChargeUploads: this process receives the uploads' lists itself
	// (`evs serve`) and charges them to the Ledger as they arrive.
	ChargeUploads bool
	// AdmitList, when set, is asked before a batch's list is read from an
	// upload of size bytes; it returns once the list may be read, or a
	// *BusyError: a million addresses cost hundreds of MB while read.
	AdmitList func(ctx context.Context, size int64) (release func(), err error)
	// MaxUploadAddresses defaults to evs.UploadMaxAddresses.
	MaxUploadAddresses int
	// Budgets, when set, finds a new full-mode batch's lanes (eta.go);
	// BatchDeadline is the batches' time limit (EVS_BATCH_DEADLINE).
	Budgets       Budgets
	BatchDeadline time.Duration
	// MaxActiveBatches is how many batches an account may have queued or
	// running (EVS_MAX_ACTIVE_BATCHES); 0 means no limit.
	MaxActiveBatches int
	Ledger           Ledger // the storage quota and outcomes cap (ledger.go); nil counts nothing
	Quota            Quota  // the address quota and the Idempotency-Key limit (quota.go)
	Retention        time.Duration
	// VerifyTimeout bounds one synchronous verification (default 20 s,
	// under API Gateway's 29 s).
	VerifyTimeout time.Duration
	Now           func() time.Time
	NewID         func() string
	Logger        *slog.Logger
	Callbacks     // the webhook parts (callback.go)
	// Outcomes, when set, keeps the reported outcomes that verdicts use;
	// nil answers the outcome routes 404.
	Outcomes   Outcomes
	OutcomeTTL time.Duration
	// OutcomeShareDomains scores by every account's counts for a domain
	// (EVS_OUTCOME_SHARE_DOMAINS).
	OutcomeShareDomains bool
	// PublishableLimits, when set (AWS), counts publishable keys' calls in
	// Quota.Store, which must then be a PublishableQuota (publishable.go);
	// `evs serve` counts them at its edge.
	PublishableLimits PublishableLimits
}

// Handler serves the API's routes.
type Handler struct {
	d     Deps
	reads *readGate
}

// New returns the handlers.
func New(d Deps) *Handler {
	if d.Now == nil {
		d.Now = time.Now
	}
	if _, ok := d.Quota.Store.(PublishableQuota); !ok && d.PublishableLimits != (PublishableLimits{}) {
		panic("api: PublishableLimits need a Quota.Store that is a PublishableQuota")
	}
	d.Retention = cmp.Or(max(d.Retention, 0), 30*24*time.Hour)
	d.VerifyTimeout = cmp.Or(max(d.VerifyTimeout, 0), 20*time.Second)
	d.Logger = cmp.Or(d.Logger, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	d.MaxCSVReply = cmp.Or(max(d.MaxCSVReply, 0), 4<<20)
	d.MaxUploadAddresses = cmp.Or(max(d.MaxUploadAddresses, 0), evs.UploadMaxAddresses)
	d.MaxBatchBody = cmp.Or(max(d.MaxBatchBody, 0), MaxBatchBody)
	d.OutcomeTTL = cmp.Or(max(d.OutcomeTTL, 0), DefaultOutcomeTTL)
	return &Handler{d: d, reads: newReadGate(d.HeavyReads)}
}

// mediaType returns the lower-case media type of Content-Type, or "".
func mediaType(req *request) string {
	ct, ok := req.header("Content-Type")
	if !ok {
		return ""
	}
	if ct == "application/json" {
		return ct // what nearly every client sends: nothing to parse
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return strings.ToLower(mt)
}

// decodeJSON decodes req's body, which must be one JSON object, into v:
// another Content-Type, unknown fields, trailing data, and anything that
// is not an object are client errors.
func decodeJSON(req *request, v any) error {
	if mediaType(req) != "application/json" {
		return evs.Errorf(evs.CodeInvalidRequest, "Content-Type must be application/json.")
	}
	b := req.body
	// encoding/json would quietly turn invalid UTF-8 into U+FFFD.
	if !utf8.Valid(b) {
		return evs.Errorf(evs.CodeInvalidRequest, "The request body is not valid UTF-8.")
	}
	// Only JSON's own whitespace: encoding/json refuses U+00A0 and others.
	trimmed := bytes.Trim(b, " \t\r\n")
	if len(trimmed) == 0 {
		return evs.Errorf(evs.CodeInvalidRequest, "The request body is empty; a JSON object is required.")
	}
	if trimmed[0] != '{' {
		return evs.Errorf(evs.CodeInvalidRequest, "The request body must be a JSON object.")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return evs.Errorf(evs.CodeInvalidRequest, "The request body is not valid: %s.", jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return evs.Errorf(evs.CodeInvalidRequest, "The request body has data after the JSON object.")
	}
	return nil
}

// jsonProblem describes a decoding error without echoing the body.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		kind := te.Type.Kind().String()
		return fmt.Sprintf("field %q must be a %s", te.Field, cmp.Or(map[string]string{"ptr": "string", "slice": "list"}[kind], kind))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too early"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	default:
		return "malformed JSON"
	}
}

// Replies are built as their meaning, without a request id, and rendered
// with the call's id only at the edge: an idempotent reply is stored so,
// and a replay is rendered like a fresh reply.
const contentTypeJSON = "application/json; charset=utf-8"

// jsonReply is a success whose body is v, a JSON object without requestId.
func jsonReply(status int, v any) idempotency.Reply {
	b, err := json.Marshal(v)
	if err != nil { // a bug to surface: our own types always marshal
		return errReply(err)
	}
	return idempotency.Reply{StatusCode: status, Body: b}
}

// errReply classifies err once into the error envelope's meaning: the
// status and {"code","message"}.
func errReply(err error) idempotency.Reply {
	code := evs.ErrorCode(err)
	b, _ := json.Marshal(errorMeaning{Code: code, Message: evs.ErrorMessage(err)})
	r := idempotency.Reply{StatusCode: HTTPStatus(code), Body: b}
	var me *methodError
	var busy *BusyError
	var le *store.LimitError
	switch {
	case r.StatusCode == http.StatusTooManyRequests && errors.As(err, &le):
		// The limits (the quotas, the Idempotency-Key limit) know when a
		// retry can pass; the other 429 is the active-batch limit.
		r.Headers = map[string]string{"Retry-After": RetryAfter(le.Retry)}
	case r.StatusCode == http.StatusTooManyRequests:
		r.Headers = map[string]string{"Retry-After": RetryAfterActiveBatches}
	case r.StatusCode == http.StatusServiceUnavailable && errors.As(err, &busy):
		r.Headers = map[string]string{"Retry-After": busy.RetryAfter}
	case r.StatusCode == http.StatusMethodNotAllowed && errors.As(err, &me):
		r.Headers = map[string]string{"Allow": strings.Join(me.allowed, ", ")}
	}
	return r
}

type errorMeaning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// withRequestID returns a JSON object's body with "requestId" as its first
// member, built in one buffer: one copy of the body, not three.
func withRequestID(body []byte, requestID string) []byte {
	out := make([]byte, 0, len(body)+len(requestID)+18)
	out = append(out, `{"requestId":`...)
	out = appendIDString(out, requestID)
	if len(body) < 2 {
		return append(out, '}')
	}
	if rest := bytes.TrimSpace(body[1:]); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, body[1:]...)
}

// appendIDString appends id as a JSON string, copied between quotes when
// it needs no escaping (a UUID, API Gateway's).
func appendIDString(b []byte, id string) []byte {
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(id) // a string: cannot fail
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, id...)
	return append(b, '"')
}

// RetryAfterActiveBatches is the Retry-After, in seconds, of the
// active-batch limit: a batch of a few thousand addresses takes about that.
const RetryAfterActiveBatches = "30"

// errNotKept marks a reply the idempotency record must not keep.
var errNotKept = errors.New("api: reply not kept")

type methodError struct {
	err     *evs.Error
	allowed []string
}

func (e *methodError) Error() string { return e.err.Error() }
func (e *methodError) Unwrap() error { return e.err }

func notAllowed(method string, allowed ...string) error {
	return &methodError{
		err:     evs.Errorf(evs.CodeMethodNotAllowed, "Method %s is not allowed here; use %s.", method, strings.Join(allowed, " or ")),
		allowed: allowed,
	}
}

// idempotent runs fn under the Idempotency-Key of req, if any, and returns
// its reply (or the stored one): a 4xx is stored and replayed, a 5xx or a
// 429 leaves no record.
func (h *Handler) idempotent(ctx context.Context, req *request, p evs.Principal, fn func(ctx context.Context) idempotency.Reply) (idempotency.Reply, bool, error) {
	key, present := req.header("Idempotency-Key")
	if !present || p.Kind == evs.KeyPublishable {
		// A publishable key is public: its records would be anyone's to
		// fill, and its trimmed replies must not answer a secret key.
		return fn(ctx), false, nil
	}
	if err := idempotency.ValidKey(key); err != nil {
		return idempotency.Reply{}, false, err
	}
	ct, _ := req.header("Content-Type")
	r, replayed, err := h.d.Idempotency.Do(ctx, idempotency.Request{
		AccountID:   p.AccountID,
		Method:      req.r.Method,
		Path:        req.r.URL.Path,
		Key:         key,
		ContentType: ct,
		Body:        req.body,
	}, func(ctx context.Context) (idempotency.Reply, error) {
		refund, err := h.chargeKey(ctx, p)
		if err != nil {
			return errReply(err), errNotKept
		}
		r := fn(ctx)
		if r.StatusCode == http.StatusTooManyRequests || r.StatusCode >= 500 {
			refund() // no record is kept
		}
		if r.StatusCode == http.StatusTooManyRequests { // about now, not the request
			return r, errNotKept
		}
		return r, nil
	})
	if errors.Is(err, errNotKept) {
		return r, false, nil
	}
	if err != nil {
		return idempotency.Reply{}, false, err
	}
	return r, replayed, nil
}
