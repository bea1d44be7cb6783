package config

import (
	"errors"
	"time"
)

// DefaultDrainTimeout is EVS_DRAIN_TIMEOUT's default: under the 30 s a
// process supervisor typically waits after SIGTERM before it kills.
const DefaultDrainTimeout = 20 * time.Second

// serveOps reads the variables of operating `evs serve` behind a proxy and
// on its own (contract, section 15): EVS_TRUSTED_PROXIES,
// EVS_DRAIN_TIMEOUT, EVS_TLS_CERT and EVS_TLS_KEY.
func serveOps(getenv func(string) string, c *Config, errs *[]error) {
	c.TrustedProxies = parsed("EVS_TRUSTED_PROXIES", getenv("EVS_TRUSTED_PROXIES"), ParseCIDRs, errs)
	if c.DrainTimeout = value(getenv, "EVS_DRAIN_TIMEOUT", DefaultDrainTimeout, "a duration like 20s (0s: do not wait)", durationFrom(0), errs); c.DrainTimeout == 0 {
		c.DrainTimeout = -1 // no wait; the zero value means the default
	}
	c.TLSCert, c.TLSKey = getenv("EVS_TLS_CERT"), getenv("EVS_TLS_KEY")
	if (c.TLSCert == "") != (c.TLSKey == "") {
		*errs = append(*errs, errors.New("EVS_TLS_CERT and EVS_TLS_KEY: set both (PEM certificate chain and private key files) or neither"))
	}
}
