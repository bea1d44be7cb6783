// Package api holds the HTTP handlers of the v1 API as API Gateway REST
// proxy handlers: they take an events.APIGatewayProxyRequest and return an
// events.APIGatewayProxyResponse. The Lambda functions start them directly;
// `evs serve` puts them behind its local API Gateway stand-in. Either way the
// same code answers.
//
// Every reply carries this call's requestId (API Gateway's
// requestContext.requestId) in the body and in X-Request-Id. Errors are
// classified once, here at the edge, into the contract's envelope.
package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
)

// Function names: the logical ids of the Lambda functions in template.yaml.
const (
	VerifyFunction   = "VerifyFunction"
	RequestsFunction = "RequestsFunction"
)

// Route is one path of the API and the function that serves it. Methods are
// the ones the handler accepts; the gateway sends every method of a known
// path to the handler (the template declares ANY), which answers 405 for the
// others, so a wrong method is told apart from an unknown path.
type Route struct {
	Path     string
	Methods  []string
	Function string
}

// Routes is the one route table of the API, shared by `evs serve` and checked
// against template.yaml by a test.
func Routes() []Route {
	return []Route{
		{Path: "/v1/verify", Methods: []string{http.MethodPost}, Function: VerifyFunction},
		{Path: "/v1/requests", Methods: []string{http.MethodPost}, Function: RequestsFunction},
		{Path: "/v1/requests/{id}", Methods: []string{http.MethodGet}, Function: RequestsFunction},
		{Path: "/v1/requests/{id}/results", Methods: []string{http.MethodGet}, Function: RequestsFunction},
		{Path: "/v1/requests/{id}/cancel", Methods: []string{http.MethodPost}, Function: RequestsFunction},
	}
}

// Verifier decides on one address. The live engine and the test-mode sandbox
// both implement it.
type Verifier interface {
	Verify(ctx context.Context, email string, mode evs.Mode) evs.Decision
}

// Queue hands a newly created batch to the workers. The batch and its items
// are already stored when Enqueue is called.
type Queue interface {
	Enqueue(ctx context.Context, b evs.Batch) error
}

// BatchStore is the part of the store the batch handlers use.
type BatchStore interface {
	CreateBatch(ctx context.Context, b evs.Batch, items []evs.Item) error
	Batch(ctx context.Context, accountID, id string) (evs.Batch, error)
	TransitionBatch(ctx context.Context, accountID, id string, from []evs.State, to evs.State, errMsg string, now time.Time) (evs.Batch, error)
	Results(ctx context.Context, accountID, id string, afterSeq, limit int, status evs.Status) ([]evs.Result, error)
	PendingItems(ctx context.Context, accountID, id string, afterSeq, limit int) ([]evs.Item, error)
}

// Deps are the handlers' dependencies.
type Deps struct {
	// Engine verifies for live accounts; Sandbox for test-mode accounts.
	Engine  Verifier
	Sandbox Verifier
	// Idempotency wraps every POST.
	Idempotency *idempotency.Keeper
	// Batches and Queue serve the batch endpoints (RequestsFunction only).
	Batches BatchStore
	Queue   Queue
	// Retention is how long batches and results are kept (default 30 days).
	Retention time.Duration
	// VerifyTimeout bounds one synchronous verification (default 20 s, under
	// API Gateway's 29 s integration limit).
	VerifyTimeout time.Duration
	Now           func() time.Time
	NewID         func() string
	Logger        *slog.Logger
	// Callbacks are the webhook parts (contract, section 10); see
	// callback.go.
	Callbacks
}

// Handler serves the API's routes.
type Handler struct {
	d Deps
}

// New returns the handlers.
func New(d Deps) *Handler {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Retention <= 0 {
		d.Retention = 30 * 24 * time.Hour
	}
	if d.VerifyTimeout <= 0 {
		d.VerifyTimeout = 20 * time.Second
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	return &Handler{d: d}
}

// Principal is the caller as the authorizer described it.
type Principal struct {
	AccountID string
	KeyID     string
	Test      bool
}

// principal reads the authorizer context API Gateway puts in the event.
// A request without one never passed the authorizer: that is our fault
// (a misconfigured route), not the client's.
func principal(req events.APIGatewayProxyRequest) (Principal, error) {
	a := req.RequestContext.Authorizer
	id, _ := a["accountId"].(string)
	if id == "" {
		return Principal{}, errors.New("api: request without an authorizer context")
	}
	keyID, _ := a["keyId"].(string)
	test := false
	switch v := a["testMode"].(type) {
	case string:
		test = v == "true"
	case bool:
		test = v
	}
	return Principal{AccountID: id, KeyID: keyID, Test: test}, nil
}

// header returns a request header, case-insensitively, as API Gateway
// passes them as sent.
func header(req events.APIGatewayProxyRequest, name string) (string, bool) {
	for k, v := range req.Headers {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	for k, v := range req.MultiValueHeaders {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[len(v)-1], true
		}
	}
	return "", false
}

// body returns the raw request body, decoding API Gateway's base64 form.
func body(req events.APIGatewayProxyRequest) ([]byte, error) {
	if !req.IsBase64Encoded {
		return []byte(req.Body), nil
	}
	b, err := base64.StdEncoding.DecodeString(req.Body)
	if err != nil {
		return nil, evs.Errorf(evs.CodeInvalidRequest, "The request body is not valid base64.")
	}
	return b, nil
}

// mediaType returns the lower-case media type of the Content-Type header, or
// "" when it is missing or unparsable.
func mediaType(req events.APIGatewayProxyRequest) string {
	ct, ok := header(req, "Content-Type")
	if !ok {
		return ""
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return strings.ToLower(mt)
}

// decodeStrict decodes one JSON object into v: unknown fields, trailing
// data, and anything that is not an object are client errors.
func decodeStrict(b []byte, v any) error {
	trimmed := strings.TrimSpace(string(b))
	if trimmed == "" {
		return evs.Errorf(evs.CodeInvalidRequest, "The request body is empty; a JSON object is required.")
	}
	if trimmed[0] != '{' {
		return evs.Errorf(evs.CodeInvalidRequest, "The request body must be a JSON object.")
	}
	dec := json.NewDecoder(strings.NewReader(trimmed))
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
		return fmt.Sprintf("field %q must be a %s", te.Field, jsonType(te.Type.Kind().String()))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too early"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	default:
		return "malformed JSON"
	}
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "slice":
		return "list"
	case "ptr":
		return "string"
	default:
		return kind
	}
}

// reply builds a JSON response with the request id header.
func reply(requestID string, status int, v any) events.APIGatewayProxyResponse {
	b, err := json.Marshal(v)
	if err != nil {
		// Our own types always marshal; if not, it is a bug to surface.
		status, b = FromError(err, requestID)
	}
	return rawReply(requestID, status, "application/json; charset=utf-8", b)
}

func rawReply(requestID string, status int, contentType string, b []byte) events.APIGatewayProxyResponse {
	return events.APIGatewayProxyResponse{
		StatusCode: status,
		Headers: map[string]string{
			"Content-Type": contentType,
			"X-Request-Id": requestID,
		},
		Body: string(b),
	}
}

// errorReply classifies err into the envelope.
func errorReply(requestID string, err error) events.APIGatewayProxyResponse {
	status, b := FromError(err, requestID)
	r := rawReply(requestID, status, "application/json; charset=utf-8", b)
	if status == http.StatusMethodNotAllowed {
		var me *methodError
		if errors.As(err, &me) {
			r.Headers["Allow"] = strings.Join(me.allowed, ", ")
		}
	}
	return r
}

// methodError is a 405 that knows which methods the path allows.
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

// fromReply turns a stored idempotent reply back into a response.
func fromReply(r idempotency.Reply) events.APIGatewayProxyResponse {
	h := make(map[string]string, len(r.Headers))
	for k, v := range r.Headers {
		h[k] = v
	}
	return events.APIGatewayProxyResponse{StatusCode: r.StatusCode, Headers: h, Body: string(r.Body)}
}

func toReply(r events.APIGatewayProxyResponse) idempotency.Reply {
	return idempotency.Reply{StatusCode: r.StatusCode, Headers: r.Headers, Body: []byte(r.Body)}
}

// idempotent runs fn under the Idempotency-Key of req, if any. Classified
// errors from fn become replies inside the wrapper, so a 4xx is stored and
// replayed like any other answer while a 5xx leaves no record.
func (h *Handler) idempotent(ctx context.Context, req events.APIGatewayProxyRequest, p Principal, raw []byte, fn func(ctx context.Context) events.APIGatewayProxyResponse) (events.APIGatewayProxyResponse, bool, error) {
	key, present := header(req, "Idempotency-Key")
	if !present {
		return fn(ctx), false, nil
	}
	if err := idempotency.ValidKey(key); err != nil {
		return events.APIGatewayProxyResponse{}, false, err
	}
	ct, _ := header(req, "Content-Type")
	r, replayed, err := h.d.Idempotency.Do(ctx, idempotency.Request{
		AccountID:   p.AccountID,
		Method:      req.HTTPMethod,
		Path:        req.Path,
		Key:         key,
		ContentType: ct,
		Body:        raw,
		RequestID:   req.RequestContext.RequestID,
	}, func(ctx context.Context) (idempotency.Reply, error) {
		return toReply(fn(ctx)), nil
	})
	if err != nil {
		return events.APIGatewayProxyResponse{}, false, err
	}
	resp := fromReply(r)
	resp.Headers["X-Request-Id"] = req.RequestContext.RequestID
	return resp, replayed, nil
}

// logCall writes the one structured line per call: never an address or a key.
func (h *Handler) logCall(ctx context.Context, req events.APIGatewayProxyRequest, p Principal, status int, start time.Time, err error, attrs ...slog.Attr) {
	level := slog.LevelInfo
	base := []slog.Attr{
		slog.String("requestId", req.RequestContext.RequestID),
		slog.String("route", req.HTTPMethod+" "+req.Resource),
		slog.Int("status", status),
		slog.Int64("latencyMs", h.d.Now().Sub(start).Milliseconds()),
		slog.String("accountId", p.AccountID),
	}
	if err != nil && status >= 500 {
		level = slog.LevelError
		// The cause is for us; the client saw only the envelope.
		base = append(base, slog.String("error", err.Error()))
	}
	h.d.Logger.LogAttrs(ctx, level, "call", append(base, attrs...)...)
}
