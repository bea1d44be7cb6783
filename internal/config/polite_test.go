package config_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/config"
)

func TestProviderLimits(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  map[string]int
		bad   bool
	}{
		{value: "", want: nil},
		{value: "4", want: map[string]int{"*": 4}},
		{value: "large=10, other=2,Google=20", want: map[string]int{"large": 10, "other": 2, "google": 20}},
		{value: "example.co.uk=3,5", want: map[string]int{"example.co.uk": 3, "*": 5}},
		{value: "0", bad: true},
		{value: "large=-1", bad: true},
		{value: "large=ten", bad: true},
		{value: "large=1,large=2", bad: true},
		{value: "a b=1", bad: true},
	} {
		for _, name := range []string{"EVS_PROVIDER_SESSIONS", "EVS_PROVIDER_RCPT_PER_MIN"} {
			c, err := config.FromEnv(env(map[string]string{name: tc.value, "EVS_SMTP_HELO": "h.example"}), false)
			got := c.ProviderSessions
			if name == "EVS_PROVIDER_RCPT_PER_MIN" {
				got = c.ProviderRcptPerMin
			}
			switch {
			case tc.bad && (err == nil || !strings.HasPrefix(err.Error(), name+": ") || strings.Contains(err.Error(), "\n")):
				t.Errorf("%s=%q: error %v, want one line naming the variable", name, tc.value, err)
			case !tc.bad && err != nil:
				t.Errorf("%s=%q: %v", name, tc.value, err)
			case !tc.bad && !maps.Equal(got, tc.want):
				t.Errorf("%s=%q: %v, want %v", name, tc.value, got, tc.want)
			}
		}
	}
}

func TestEgressName(t *testing.T) {
	for vars, want := range map[[2]string]string{
		{"", ""}:                                "direct",
		{"direct", ""}:                          "direct",
		{"", "socks5://user:pw@10.1.2.3:1080"}:  "10.1.2.3",
		{"proxy", "socks5://exit.example:1080"}: "exit.example",
	} {
		c, err := config.FromEnv(env(map[string]string{"EVS_SMTP": vars[0], "EVS_SMTP_PROXY": vars[1], "EVS_SMTP_HELO": "h.example"}), false)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.EgressName(); got != want {
			t.Errorf("EVS_SMTP=%q EVS_SMTP_PROXY=%q: egress %q, want %q", vars[0], vars[1], got, want)
		}
	}
}
