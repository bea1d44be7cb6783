package api_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
)

func TestFromError(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{evs.Errorf(evs.CodeInvalidRequest, "bad"), 400, "invalid_request"},
		{evs.Errorf(evs.CodePayloadTooLarge, "big"), 413, "payload_too_large"},
		{evs.Errorf(evs.CodeUnauthorized, "no"), 401, "unauthorized"},
		{evs.Errorf(evs.CodeForbidden, "no"), 403, "forbidden"},
		{evs.Errorf(evs.CodeNotFound, "no"), 404, "not_found"},
		{evs.Errorf(evs.CodeMethodNotAllowed, "no"), 405, "method_not_allowed"},
		{evs.Errorf(evs.CodeIdempotencyInProgress, "no"), 409, "idempotency_in_progress"},
		{evs.Errorf(evs.CodeInvalidState, "no"), 409, "invalid_state"},
		{evs.Errorf(evs.CodeIdempotencyKeyReused, "no"), 422, "idempotency_key_reused"},
		{evs.Errorf(evs.CodeRateLimited, "no"), 429, "rate_limited"},
		{evs.Errorf(evs.CodeUnavailable, "no"), 503, "unavailable"},
		{errors.New("secret detail"), 500, "internal_error"},
	}
	for _, tt := range tests {
		status, body := api.FromError(tt.err, "rid-1")
		if status != tt.status {
			t.Errorf("%v: status %d, want %d", tt.err, status, tt.status)
		}
		var r api.ErrorEnvelope
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		if r.Error.Code != tt.code || r.Error.RequestID != "rid-1" || r.Error.Message == "" {
			t.Errorf("%v: envelope %+v", tt.err, r)
		}
		if tt.code == "internal_error" && r.Error.Message != "An internal error occurred." {
			t.Errorf("internal detail leaked: %q", r.Error.Message)
		}
	}
	if len(api.ErrorCodes()) != 12 {
		t.Errorf("Codes() = %d codes, want the contract's 12", len(api.ErrorCodes()))
	}
}
