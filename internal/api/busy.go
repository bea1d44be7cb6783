package api

import "github.com/evs-dev/evs/internal/evs"

// BusyError refuses work the server has no room for now: 503 unavailable
// with RetryAfter (seconds) as Retry-After.
type BusyError struct {
	Err        *evs.Error
	RetryAfter string
}

func (e *BusyError) Error() string { return e.Err.Error() }
func (e *BusyError) Unwrap() error { return e.Err }
