package config_test

import (
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/config"
)

// TestOutcomeShareDomains: EVS_OUTCOME_SHARE_DOMAINS is off unless set
// to on (any case); anything else is refused with the variable named.
func TestOutcomeShareDomains(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    bool
		wantErr bool
	}{
		{"", false, false}, {"off", false, false}, {"OFF", false, false},
		{"on", true, false}, {"On", true, false},
		{"yes", false, true}, {"1", false, true}, {"true", false, true},
	} {
		c, err := config.FromEnv(env(map[string]string{"EVS_SMTP_HELO": "probe.example.net", "EVS_OUTCOME_SHARE_DOMAINS": tc.value}), false)
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "EVS_OUTCOME_SHARE_DOMAINS") {
				t.Errorf("%q: err %v, want one naming the variable", tc.value, err)
			}
			continue
		}
		if err != nil || c.OutcomeShareDomains != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.value, c.OutcomeShareDomains, err, tc.want)
		}
	}
}
