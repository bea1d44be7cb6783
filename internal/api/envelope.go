package api

// The contract's error envelope and the map from error codes to HTTP status
// codes: the single place where a classified error becomes a reply, so the
// Lambda functions and `evs serve` answer identically.

import (
	"cmp"
	"encoding/json"

	"github.com/evs-dev/evs/internal/evs"
)

var statusByCode = map[string]int{
	evs.CodeInvalidRequest:        400,
	evs.CodePayloadTooLarge:       413,
	evs.CodeUnauthorized:          401,
	evs.CodeForbidden:             403,
	evs.CodeNotFound:              404,
	evs.CodeMethodNotAllowed:      405,
	evs.CodeIdempotencyInProgress: 409,
	evs.CodeInvalidState:          409,
	evs.CodeIdempotencyKeyReused:  422,
	evs.CodeRateLimited:           429,
	evs.CodeInternal:              500,
	evs.CodeUnavailable:           503,
}

// HTTPStatus returns the HTTP status for an error code; unknown codes are 500.
func HTTPStatus(code string) int {
	return cmp.Or(statusByCode[code], 500)
}

// ErrorObject is the inner object of the envelope.
type ErrorObject struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"requestId"`
}

// ErrorEnvelope is the whole error body: {"error": {...}}.
type ErrorEnvelope struct {
	Error ErrorObject `json:"error"`
}

// ErrorBody renders the envelope for code and message.
func ErrorBody(code, message, requestID string) []byte {
	b, _ := json.Marshal(ErrorEnvelope{Error: ErrorObject{Code: code, Message: message, RequestID: requestID}})
	return b
}

// FromError classifies err once and returns the HTTP status and envelope body.
func FromError(err error, requestID string) (int, []byte) {
	code := evs.ErrorCode(err)
	return HTTPStatus(code), ErrorBody(code, evs.ErrorMessage(err), requestID)
}
