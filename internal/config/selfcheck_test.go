package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/config"
)

// TestSelfCheckEvery: EVS_SELFCHECK_EVERY defaults to an hour, and what is
// not a duration of at least a second is one error naming it.
func TestSelfCheckEvery(t *testing.T) {
	for _, c := range []struct {
		value string
		want  time.Duration
		err   bool
	}{
		{"", time.Hour, false},
		{"15m", 15 * time.Minute, false},
		{"1s", time.Second, false},
		{"500ms", 0, true},
		{"0", 0, true},
		{"-1h", 0, true},
		{"hourly", 0, true},
	} {
		cfg, err := config.FromEnv(env(map[string]string{"EVS_SELFCHECK_EVERY": c.value}), false)
		if c.err {
			if err == nil || !strings.Contains(err.Error(), "EVS_SELFCHECK_EVERY") || strings.Contains(err.Error(), "\n") {
				t.Errorf("%q: error %v, want one line naming EVS_SELFCHECK_EVERY", c.value, err)
			}
			continue
		}
		if err != nil || cfg.SelfCheckEvery != c.want {
			t.Errorf("%q: %v (%v), want %v", c.value, cfg.SelfCheckEvery, err, c.want)
		}
	}
}
