package app_test

import (
	"testing"

	"github.com/evs-dev/evs/internal/app"
)

func TestReplyClass(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]string{250: "2xx", 450: "4xx", 550: "5xx", 0: "", 199: "", 600: ""} {
		if got := app.ReplyClass(code); got != want {
			t.Errorf("ReplyClass(%d) = %q, want %q", code, got, want)
		}
	}
}
