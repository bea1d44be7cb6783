package server

import (
	"net/http"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
)

// GatewayResponse is a reply the edge itself gives, before or instead of
// a function: API Gateway's "gateway responses". template.yaml declares the
// same ones with the same bodies (a test compares them).
type GatewayResponse struct {
	// Type is API Gateway's response type, e.g. "UNAUTHORIZED".
	Type    string
	Status  int
	Code    string
	Message string
	// Headers are extra headers besides Content-Type and X-Request-Id.
	Headers map[string]string
}

// The gateway response types `evs serve`'s edge renders.
const (
	unauthorized      = "UNAUTHORIZED"
	accessDenied      = "ACCESS_DENIED"
	throttled         = "THROTTLED"
	quotaExceeded     = "QUOTA_EXCEEDED"
	badRequestBody    = "BAD_REQUEST_BODY"
	missingAuthToken  = "MISSING_AUTHENTICATION_TOKEN"
	requestTooLarge   = "REQUEST_TOO_LARGE"
	default4XX        = "DEFAULT_4XX"
	default5XX        = "DEFAULT_5XX"
	retryAfterDefault = "1"
)

// GatewayResponses returns every gateway response, keyed by type. MISSING_
// AUTHENTICATION_TOKEN is what API Gateway answers for a path it has no
// route for, so it is the contract's 404 not_found.
func GatewayResponses() map[string]GatewayResponse {
	return map[string]GatewayResponse{
		unauthorized:     {Type: unauthorized, Status: http.StatusUnauthorized, Code: evs.CodeUnauthorized, Message: "Missing, malformed or unknown API key: send it in the X-Api-Key header (not Authorization)."},
		accessDenied:     {Type: accessDenied, Status: http.StatusForbidden, Code: evs.CodeForbidden, Message: "The API key is revoked or its account is suspended, or a publishable key called another route than POST /v1/verify."},
		throttled:        {Type: throttled, Status: http.StatusTooManyRequests, Code: evs.CodeRateLimited, Message: "Too many requests; retry after the time in Retry-After.", Headers: map[string]string{"Retry-After": retryAfterDefault}},
		quotaExceeded:    {Type: quotaExceeded, Status: http.StatusTooManyRequests, Code: evs.CodeRateLimited, Message: "The account's request quota is used up.", Headers: map[string]string{"Retry-After": "3600"}},
		badRequestBody:   {Type: badRequestBody, Status: http.StatusBadRequest, Code: evs.CodeInvalidRequest, Message: "The request body is invalid."},
		missingAuthToken: {Type: missingAuthToken, Status: http.StatusNotFound, Code: evs.CodeNotFound, Message: "No such route."},
		// On AWS this is what a body the platform will not deliver gets
		// (the handlers answer the smaller ones themselves, naming the
		// route's limit); on `evs serve` every such body reaches the
		// handler, which names the route's limit.
		requestTooLarge: {Type: requestTooLarge, Status: http.StatusRequestEntityTooLarge, Code: evs.CodePayloadTooLarge, Message: "The request body is too large; send large lists with POST /v1/uploads."},
		default4XX:      {Type: default4XX, Status: http.StatusBadRequest, Code: evs.CodeInvalidRequest, Message: "The request is invalid."},
		default5XX:      {Type: default5XX, Status: http.StatusInternalServerError, Code: evs.CodeInternal, Message: "An internal error occurred."},
	}
}

// writeResponse renders gateway response typ; extra headers override the
// defaults (the local throttle knows the real Retry-After).
func writeResponse(w http.ResponseWriter, typ, requestID string, extra map[string]string) int {
	r := GatewayResponses()[typ]
	for _, hs := range []map[string]string{r.Headers, extra} {
		for k, v := range hs {
			w.Header().Set(k, v)
		}
	}
	return writeError(w, r.Status, r.Code, r.Message, requestID)
}

// writeError answers with the contract's error envelope of code and
// message. Here, as in every reply of the edge's own, X-Request-Id is
// api.Observe's, set before any handler runs.
func writeError(w http.ResponseWriter, status int, code, message, requestID string) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(api.ErrorBody(code, message, requestID))
	return status
}
