// Package evs is the domain at the centre of the service: accounts and their
// keys, batches with their items, results and counters, the verdict on one
// address (Decision, Status, Reason, Mode), the one error type whose codes
// the edges map to HTTP, and the fair share of slots between accounts (Fair)
// that evs serve's batch lanes and webhook deliveries follow. It imports
// nothing of AWS, SQL or HTTP. The decision carries the contract's JSON
// names, so the API renders it as it is, with no copy of its own; the stores
// encode it in their own formats.
package evs

import (
	"errors"
	"fmt"
)

// Error codes: the API's closed set.
const (
	CodeInvalidRequest        = "invalid_request"
	CodePayloadTooLarge       = "payload_too_large"
	CodeUnauthorized          = "unauthorized"
	CodeForbidden             = "forbidden"
	CodeNotFound              = "not_found"
	CodeMethodNotAllowed      = "method_not_allowed"
	CodeIdempotencyInProgress = "idempotency_in_progress"
	CodeInvalidState          = "invalid_state"
	CodeIdempotencyKeyReused  = "idempotency_key_reused"
	CodeRateLimited           = "rate_limited"
	CodeInternal              = "internal_error"
	CodeUnavailable           = "unavailable"
)

// Error is the service's one error type. Code is one of the Code* constants;
// Message is safe to show to a client. Err, when set, is the cause kept for
// logs and errors.Is, never shown to clients.
type Error struct {
	Code    string
	Message string
	Err     error
}

// Error implements the error interface.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap exposes the cause to errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given code and a client-safe message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with the given code and message that keeps cause for
// logs. The cause's text never reaches a client.
func Wrap(cause error, code, message string) *Error {
	return &Error{Code: code, Message: message, Err: cause}
}

// ErrorCode returns the code of the first *Error in err's chain, or
// CodeInternal for any other non-nil error: unclassified errors are our fault.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessage returns the client-safe message of err. Unclassified errors get
// a generic sentence so internal details never leak.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Message
	}
	return "An internal error occurred."
}
