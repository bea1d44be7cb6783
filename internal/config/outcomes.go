package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultOutcomeTTL is EVS_OUTCOME_TTL's default: a reported outcome is
// kept a year after it was received (contract, section 18).
const DefaultOutcomeTTL = 365 * 24 * time.Hour

// outcomeTTL reads EVS_OUTCOME_TTL: a positive whole number of days
// ("365d"), as retentions are written, or a Go duration ("8760h").
func outcomeTTL(getenv func(string) string, errs *[]error) time.Duration {
	return value(getenv, "EVS_OUTCOME_TTL", DefaultOutcomeTTL, "a positive number of days like 365d or a duration like 8760h", func(s string) (time.Duration, bool) {
		if n, ok := strings.CutSuffix(s, "d"); ok {
			days, err := strconv.Atoi(n)
			return time.Duration(days) * 24 * time.Hour, err == nil && days > 0 && days <= 100*365
		}
		return durationFrom(1)(s)
	}, errs)
}

// outcomeShareDomains reads EVS_OUTCOME_SHARE_DOMAINS: "on" shares the
// per-domain counts of outcomes across accounts. Off by default: one
// account's outcomes would move the scores another sees.
func outcomeShareDomains(getenv func(string) string, errs *[]error) bool {
	switch s := strings.ToLower(getenv("EVS_OUTCOME_SHARE_DOMAINS")); s {
	case "", "off":
		return false
	case "on":
		return true
	default:
		*errs = append(*errs, fmt.Errorf("EVS_OUTCOME_SHARE_DOMAINS: %.40q is not on or off", s))
		return false
	}
}

// snsTopicArn is an SNS topic's ARN, in any partition.
var snsTopicArn = regexp.MustCompile(`^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_.-]{1,256}$`)

// snsTopics reads EVS_SNS_TOPICS: comma-separated SNS TopicArns whose SES
// notifications are taken (POST /v1/outcomes/sns, the AWS worker); empty
// takes any topic whose messages verify.
func snsTopics(getenv func(string) string, errs *[]error) []string {
	var out []string
	for _, t := range strings.Split(getenv("EVS_SNS_TOPICS"), ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if !snsTopicArn.MatchString(t) {
			*errs = append(*errs, fmt.Errorf("EVS_SNS_TOPICS: %.80q is not an SNS topic ARN like arn:aws:sns:us-east-1:123456789012:ses-events", t))
			continue
		}
		out = append(out, t)
	}
	return out
}
