package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// providerName is what may name a provider or a class in a limit: a
// provider of the contract's section 2 (google, microsoft365, ...), a
// registrable domain (example.com), or a class (large, gateway, other).
var providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`)

// providerLimits reads a politeness limit: a positive whole number for
// every provider ("4"), or a comma-separated list of name=number pairs
// where a name is a provider, a class or "*" ("large=10,other=2,
// google=20"). Unset is nil: the class defaults.
func providerLimits(getenv func(string) string, name string, errs *[]error) map[string]int {
	s := strings.TrimSpace(getenv(name))
	if s == "" {
		return nil
	}
	bad := func() map[string]int {
		*errs = append(*errs, fmt.Errorf("%s: %q is not a positive whole number or a list like large=10,other=2,google=20", name, s))
		return nil
	}
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		k, v, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found {
			k, v = "*", k
		}
		k = strings.ToLower(strings.TrimSpace(k))
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || (k != "*" && !providerName.MatchString(k)) {
			return bad()
		}
		if _, dup := out[k]; dup {
			return bad()
		}
		out[k] = n
	}
	return out
}

// EgressName names this process's egress for politeness limits: the SOCKS
// exit's name with one, the names joined by "+" with several (each exit in
// rotation then has limits of its own, politeness.Gate.Exits; the joined
// name keys sessions only while none is in rotation), else "direct".
func (c Config) EgressName() string {
	if c.SMTP != SMTPProxy || len(c.SMTPExits) == 0 {
		return "direct"
	}
	names := make([]string, len(c.SMTPExits))
	for i, e := range c.SMTPExits {
		names[i] = e.Name
	}
	return strings.Join(names, "+")
}
