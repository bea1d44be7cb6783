package evs_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/evs-dev/evs/internal/evs"
)

func TestErrorCodeAndMessage(t *testing.T) {
	cause := errors.New("disk on fire at /var/secret")
	tests := []struct {
		name    string
		err     error
		code    string
		message string
		isCause bool
	}{
		{"nil", nil, "", "", false},
		{"plain error is internal", cause, evs.CodeInternal, "An internal error occurred.", true},
		{"coded", evs.Errorf(evs.CodeNotFound, "No batch %q.", "x"), evs.CodeNotFound, `No batch "x".`, false},
		{"wrapped coded", fmt.Errorf("load: %w", evs.Wrap(cause, evs.CodeUnavailable, "Store unavailable.")), evs.CodeUnavailable, "Store unavailable.", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := evs.ErrorCode(tt.err); got != tt.code {
				t.Errorf("ErrorCode = %q, want %q", got, tt.code)
			}
			if got := evs.ErrorMessage(tt.err); got != tt.message {
				t.Errorf("ErrorMessage = %q, want %q", got, tt.message)
			}
			if got := errors.Is(tt.err, cause); got != tt.isCause {
				t.Errorf("errors.Is(cause) = %v, want %v", got, tt.isCause)
			}
		})
	}
}
