package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/config"
)

// TestServeOpsEnv: EVS_TRUSTED_PROXIES, EVS_DRAIN_TIMEOUT and the TLS pair
// are read with their defaults, and a bad value is one error naming its
// variable.
func TestServeOpsEnv(t *testing.T) {
	cases := []struct {
		name     string
		vars     map[string]string
		want     string // fmt of TrustedProxies, DrainTimeout, TLSCert, TLSKey
		errMatch string
	}{
		{name: "defaults", vars: map[string]string{}, want: "[] 20s  "},
		{name: "set", vars: map[string]string{"EVS_TRUSTED_PROXIES": "127.0.0.2/32, 10.1.2.3/8,fd00::/8", "EVS_DRAIN_TIMEOUT": "45s",
			"EVS_TLS_CERT": "/etc/evs/cert.pem", "EVS_TLS_KEY": "/etc/evs/key.pem"},
			want: "[127.0.0.2/32 10.0.0.0/8 fd00::/8] 45s /etc/evs/cert.pem /etc/evs/key.pem"},
		{name: "no drain", vars: map[string]string{"EVS_DRAIN_TIMEOUT": "0s"}, want: "[] -1ns  "},
		{name: "bad proxy entry", vars: map[string]string{"EVS_TRUSTED_PROXIES": "10.0.0.1"}, errMatch: `EVS_TRUSTED_PROXIES: entry "10.0.0.1" is not a CIDR`},
		{name: "empty proxy entry", vars: map[string]string{"EVS_TRUSTED_PROXIES": "10.0.0.0/8,"}, errMatch: "EVS_TRUSTED_PROXIES: entry 2 is empty"},
		{name: "negative drain", vars: map[string]string{"EVS_DRAIN_TIMEOUT": "-1s"}, errMatch: "EVS_DRAIN_TIMEOUT"},
		{name: "drain not a duration", vars: map[string]string{"EVS_DRAIN_TIMEOUT": "20"}, errMatch: "EVS_DRAIN_TIMEOUT"},
		{name: "cert without key", vars: map[string]string{"EVS_TLS_CERT": "/etc/evs/cert.pem"}, errMatch: "EVS_TLS_CERT and EVS_TLS_KEY: set both"},
		{name: "key without cert", vars: map[string]string{"EVS_TLS_KEY": "/etc/evs/key.pem"}, errMatch: "EVS_TLS_CERT and EVS_TLS_KEY: set both"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.FromEnv(env(c.vars), false)
			if c.errMatch != "" {
				if err == nil || !strings.Contains(err.Error(), c.errMatch) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error %v, want one line containing %s", err, c.errMatch)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprint(cfg.TrustedProxies, " ", cfg.DrainTimeout, " ", cfg.TLSCert, " ", cfg.TLSKey)
			if got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}
