package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestUnknown(t *testing.T) {
	cases := []struct {
		environ []string
		want    []string
	}{
		{[]string{"EVS_DATA_DIR=/x", "HOME=/root", "PATH=/bin", "EVS_SMTP=off"}, nil},
		{[]string{"EVS_RATELIMIT=5"}, []string{"EVS_RATELIMIT is not a variable evs reads, and is ignored; did you mean EVS_RATE_LIMIT?"}},
		{[]string{"EVS_DATADIR=/x", "EVS_SMTP_HELLO=mx.example"}, []string{
			"EVS_DATADIR is not a variable evs reads, and is ignored; did you mean EVS_DATA_DIR?",
			"EVS_SMTP_HELLO is not a variable evs reads, and is ignored; did you mean EVS_SMTP_HELO?",
		}},
		{[]string{"EVS_log_level=debug"}, []string{"EVS_log_level is not a variable evs reads, and is ignored; did you mean EVS_LOG_LEVEL?"}},
		// Too far from every known name for a guess.
		{[]string{"EVS_COMPLETELY_DIFFERENT=1"}, []string{"EVS_COMPLETELY_DIFFERENT is not a variable evs reads, and is ignored"}},
		// Not ours.
		{[]string{"EVSX=1", "MY_EVS_ADDR=1"}, nil},
	}
	for _, c := range cases {
		if got := Unknown(c.environ); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Unknown(%q) = %q, want %q", c.environ, got, c.want)
		}
	}
	// A value never shows in a warning.
	if w := Unknown([]string{"EVS_API_KEYS=evs.secret"}); len(w) != 1 || strings.Contains(w[0], "secret") {
		t.Errorf("warning about a key-bearing variable: %q", w)
	}
}

// TestKnownHoldsEveryVariableRead: each EVS_* variable FromEnv reads, on
// either side, is in Known, so it is never warned about.
func TestKnownHoldsEveryVariableRead(t *testing.T) {
	read := map[string]bool{}
	getenv := func(k string) string { read[k] = true; return "" }
	_, _ = FromEnv(getenv, false)
	_, _ = FromEnv(getenv, true)
	for k := range read {
		if strings.HasPrefix(k, "EVS_") && !slices.Contains(Known, k) {
			t.Errorf("FromEnv reads %s, which Known does not list", k)
		}
	}
	if len(read) == 0 {
		t.Fatal("FromEnv read nothing")
	}
}
