package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Known lists every EVS_* variable some part of evs reads: FromEnv's (a
// test holds the two together), plus those of the test harness, which a
// developer's shell may export.
var Known = []string{
	"EVS_ADDR", "EVS_API_KEY", "EVS_AUTH_TTL", "EVS_BATCHES_TABLE", "EVS_BATCH_DEADLINE", "EVS_CACHE_TTL", "EVS_DATA_DIR",
	"EVS_DNS_SERVERS", "EVS_EGRESS_ALLOW", "EVS_IDEMPOTENCY_TABLE", "EVS_INPUT_BUCKET", "EVS_KEYS_TABLE",
	"EVS_LOG_LEVEL", "EVS_MAX_ACTIVE_BATCHES", "EVS_MAX_CONNS", "EVS_METRICS_ADDR", "EVS_MIN_FREE_BYTES",
	"EVS_PROVIDER_RCPT_PER_MIN", "EVS_PROVIDER_SESSIONS", "EVS_PUBLIC_URL", "EVS_PUBLISHABLE_RATE", "EVS_PUBLISHABLE_RATE_PER_ADDRESS", "EVS_QUEUE_URL",
	"EVS_QUOTA_ADDRESSES", "EVS_QUOTA_PERIOD", "EVS_QUOTA_PUBLISHABLE_PERCENT", "EVS_RATE_LIMIT", "EVS_RESULTS_TABLE", "EVS_RETENTION_DAYS",
	"EVS_SMTP", "EVS_SMTP_FROM", "EVS_SMTP_HELO", "EVS_SMTP_PORT", "EVS_SMTP_PROXY", "EVS_SMTP_PROXY_SECRET",
	"EVS_SMTP_EXIT_TIMEOUT", "EVS_SMTP_EXIT_CANARY",
	"EVS_URL", "EVS_USAGE_PLAN_ID", "EVS_TRUSTED_PROXIES", "EVS_DRAIN_TIMEOUT", "EVS_TLS_CERT", "EVS_TLS_KEY",
	"EVS_MAX_STORED_BYTES", "EVS_MAX_OUTCOMES", "EVS_MAX_IDEMPOTENCY_KEYS", "EVS_SMTP_EGRESS_IP", "EVS_BLOCKLISTS", "EVS_SELFCHECK_EVERY",
	"EVS_OUTCOME_TTL", "EVS_OUTCOME_SHARE_DOMAINS", "EVS_SNS_TOPICS", "EVS_SES_ACCOUNT", "EVS_SES_QUEUE_ARN",
	// The test harness (internal/testkit, infra/scripts/with-moto.sh, the
	// console's browser test).
	"EVS_MOTO_ENDPOINT", "EVS_TEST_SOCKS5", "EVS_TEST_SOCKS5_EXTERNAL", "EVS_SCREENSHOTS",
}

// Unknown returns one warning for each EVS_* variable in environ (as
// os.Environ gives it) that evs does not read, naming the known variable
// nearest to it; values are never quoted.
func Unknown(environ []string) []string {
	var names []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "EVS_") && !slices.Contains(Known, name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var warnings []string
	for _, name := range names {
		w := name + " is not a variable evs reads, and is ignored"
		if near := nearest(name); near != "" {
			w += fmt.Sprintf("; did you mean %s?", near)
		}
		warnings = append(warnings, w)
	}
	return warnings
}

// nearest is the known name closest to name in edit distance, or "" when
// even that one is too far to be a likely misspelling: more than a third
// of the name's letters after the prefix would have to change.
func nearest(name string) string {
	best, bestD := "", 0
	for _, k := range Known {
		if d := levenshtein(strings.ToUpper(name), k); best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	if bestD > max(2, (len(name)-len("EVS_"))/3) {
		return ""
	}
	return best
}

// levenshtein is the edit distance of a and b (insertions, deletions and
// substitutions of bytes; the names are ASCII).
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
