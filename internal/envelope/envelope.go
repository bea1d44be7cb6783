// Package envelope renders the contract's error envelope and maps error codes
// to HTTP status codes. It is the single place where a classified error becomes
// a reply, so the Lambda handlers and the local gateway answer identically.
package envelope

import (
	"encoding/json"

	"github.com/evs-dev/evs/internal/evs"
)

var statusByCode = map[string]int{
	evs.CodeInvalidRequest:        400,
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

// Codes returns every error code of the contract, for tests and docs.
func Codes() []string {
	out := make([]string, 0, len(statusByCode))
	for c := range statusByCode {
		out = append(out, c)
	}
	return out
}

// Status returns the HTTP status for an error code; unknown codes are 500.
func Status(code string) int {
	if s, ok := statusByCode[code]; ok {
		return s
	}
	return 500
}

// Error is the inner object of the envelope.
type Error struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"requestId"`
}

// Reply is the whole error body: {"error": {...}}.
type Reply struct {
	Error Error `json:"error"`
}

// Body renders the envelope for code and message.
func Body(code, message, requestID string) []byte {
	b, _ := json.Marshal(Reply{Error: Error{Code: code, Message: message, RequestID: requestID}})
	return b
}

// FromError classifies err once and returns the HTTP status and envelope body.
func FromError(err error, requestID string) (int, []byte) {
	code := evs.ErrorCode(err)
	return Status(code), Body(code, evs.ErrorMessage(err), requestID)
}
