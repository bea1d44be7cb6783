package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultOutcomeTTL is EVS_OUTCOME_TTL's default: a reported outcome is
// kept a year after it was received (contract, section 18).
const DefaultOutcomeTTL = 365 * 24 * time.Hour

// outcomeTTL reads EVS_OUTCOME_TTL: a whole number of days ("365d") or a
// Go duration ("8760h"), positive. Days are accepted because a retention
// is written in days, and a Go duration has none.
func outcomeTTL(getenv func(string) string, errs *[]error) time.Duration {
	s := getenv("EVS_OUTCOME_TTL")
	if s == "" {
		return DefaultOutcomeTTL
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.Atoi(n); err == nil && days > 0 && days <= 100*365 {
			return time.Duration(days) * 24 * time.Hour
		}
	} else if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d
	}
	*errs = append(*errs, fmt.Errorf("EVS_OUTCOME_TTL: %q is not a positive number of days like 365d or a duration like 8760h", s))
	return DefaultOutcomeTTL
}
