package gateway

import (
	"net/http"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
)

// Response is a reply the gateway itself gives, before or instead of a
// function: API Gateway's "gateway responses". template.yaml declares the
// same ones with the same bodies (a test compares them).
type Response struct {
	// Type is API Gateway's response type, e.g. "UNAUTHORIZED".
	Type    string
	Status  int
	Code    string
	Message string
	// Headers are extra headers besides Content-Type and X-Request-Id.
	Headers map[string]string
}

// The gateway response types the local gateway renders.
const (
	Unauthorized      = "UNAUTHORIZED"
	AccessDenied      = "ACCESS_DENIED"
	Throttled         = "THROTTLED"
	QuotaExceeded     = "QUOTA_EXCEEDED"
	BadRequestBody    = "BAD_REQUEST_BODY"
	MissingAuthToken  = "MISSING_AUTHENTICATION_TOKEN"
	RequestTooLarge   = "REQUEST_TOO_LARGE"
	Default4XX        = "DEFAULT_4XX"
	Default5XX        = "DEFAULT_5XX"
	retryAfterDefault = "1"
)

// Responses returns every gateway response, keyed by type. MISSING_
// AUTHENTICATION_TOKEN is what API Gateway answers for a path it has no
// route for, so it is the contract's 404 not_found.
func Responses() map[string]Response {
	rs := []Response{
		{Type: Unauthorized, Status: http.StatusUnauthorized, Code: evs.CodeUnauthorized, Message: "Missing, malformed or unknown API key."},
		{Type: AccessDenied, Status: http.StatusForbidden, Code: evs.CodeForbidden, Message: "The API key is revoked or its account is suspended."},
		{Type: Throttled, Status: http.StatusTooManyRequests, Code: evs.CodeRateLimited, Message: "Too many requests; retry after the time in Retry-After.", Headers: map[string]string{"Retry-After": retryAfterDefault}},
		{Type: QuotaExceeded, Status: http.StatusTooManyRequests, Code: evs.CodeRateLimited, Message: "The account's request quota is used up.", Headers: map[string]string{"Retry-After": "3600"}},
		{Type: BadRequestBody, Status: http.StatusBadRequest, Code: evs.CodeInvalidRequest, Message: "The request body is invalid."},
		{Type: MissingAuthToken, Status: http.StatusNotFound, Code: evs.CodeNotFound, Message: "No such route."},
		{Type: RequestTooLarge, Status: http.StatusBadRequest, Code: evs.CodeInvalidRequest, Message: "The request body is too large."},
		{Type: Default4XX, Status: http.StatusBadRequest, Code: evs.CodeInvalidRequest, Message: "The request is invalid."},
		{Type: Default5XX, Status: http.StatusInternalServerError, Code: evs.CodeInternal, Message: "An internal error occurred."},
	}
	m := make(map[string]Response, len(rs))
	for _, r := range rs {
		m[r.Type] = r
	}
	return m
}

// writeResponse renders gateway response typ; extra headers override the
// defaults (the local throttle knows the real Retry-After).
func writeResponse(w http.ResponseWriter, typ, requestID string, extra map[string]string) int {
	r := Responses()[typ]
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Request-Id", requestID)
	for k, v := range r.Headers {
		h.Set(k, v)
	}
	for k, v := range extra {
		h.Set(k, v)
	}
	w.WriteHeader(r.Status)
	_, _ = w.Write(api.ErrorBody(r.Code, r.Message, requestID))
	return r.Status
}
