// Package config reads the service's configuration from the environment,
// the same variables for `evs` and the Lambda functions. It is the only
// reader of the environment: every variable is validated here, once, and a
// bad value is reported as one line naming the variable and the form it
// accepts. It also says which build is running (BuildInfo) and holds the
// egress policy (egress.go) every component that dials for a tenant's
// input shares. It imports nothing heavy and nothing else of ours, so every
// package can link it.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// SMTP modes of EVS_SMTP.
const (
	SMTPDirect = "direct"
	SMTPProxy  = "proxy"
	SMTPOff    = "off"
)

// Periods of EVS_QUOTA_PERIOD.
const (
	QuotaDay   = "day"
	QuotaMonth = "month"
)

// Config is the service's configuration.
type Config struct {
	Addr       string
	DataDir    string
	DNSServers []string
	SMTP       string
	// SMTPProxy is the SOCKS5 exits, a comma-separated list of
	// socks5://[user:pass@]host:port[#egress-ip] (EVS_SMTP_PROXY, or on
	// Lambda the secret's value, SetSMTPProxy). It may hold passwords:
	// never log it.
	SMTPProxy string
	SMTPExits []SMTPExit // SMTPProxy read: what the dialer uses
	// SMTPProxySecret is the ARN of the secret whose value is SMTPProxy
	// (EVS_SMTP_PROXY_SECRET, Lambda only): the composition root fetches
	// it, so this package stays free of AWS.
	SMTPProxySecret string
	// ExitTimeout bounds each SOCKS5 handshake and health probe of an exit
	// (EVS_SMTP_EXIT_TIMEOUT).
	ExitTimeout time.Duration
	// ExitCanary is where an exit's health probe asks it to CONNECT
	// (EVS_SMTP_EXIT_CANARY); zero: the exit's own loopback.
	ExitCanary netip.AddrPort
	SMTPPort   int
	HELO       string
	MailFrom   string
	RateLimit  float64       // requests per second per account; 0 means off
	AuthTTL    time.Duration // the local gateway's authorizer cache TTL
	Retention  time.Duration // of batches and results
	// Egress is the policy for connections that tenants' input names
	// (EVS_EGRESS_ALLOW); nil refuses every special-purpose range.
	Egress *EgressPolicy
	// EgressIP is the public address SMTP probes leave from
	// (EVS_SMTP_EGRESS_IP), which the self-check checks; zero when unknown.
	EgressIP netip.Addr
	// Blocklists are the DNS blocklist zones the self-check asks about
	// EgressIP (EVS_BLOCKLISTS, default DefaultBlocklists).
	Blocklists     []string
	SelfCheckEvery time.Duration // EVS_SELFCHECK_EVERY
	// HELOFromHost: HELO was not configured and is the host name (evs
	// serve warns about it).
	HELOFromHost bool
	LogLevel     slog.Level
	// MaxActiveBatches is how many batches an account may have queued or
	// running at once (EVS_MAX_ACTIVE_BATCHES).
	MaxActiveBatches int
	// QuotaAddresses is how many addresses an account may have verified per
	// QuotaPeriod, UTC (EVS_QUOTA_ADDRESSES, EVS_QUOTA_PERIOD); 0: no quota.
	QuotaAddresses int
	QuotaPeriod    string
	// QuotaPublishablePercent is the share of QuotaAddresses an account's
	// publishable keys may use together (EVS_QUOTA_PUBLISHABLE_PERCENT).
	QuotaPublishablePercent int
	// PublishableRate and PublishableRatePerAddress are a publishable
	// key's calls a minute, from all client addresses and from one, unless
	// the key has its own (EVS_PUBLISHABLE_RATE,
	// EVS_PUBLISHABLE_RATE_PER_ADDRESS).
	PublishableRate, PublishableRatePerAddress int
	// The per-account bounds of EVS_MAX_STORED_BYTES (lists' rows,
	// results, exports, outcomes, uploads), EVS_MAX_OUTCOMES (a tenth of
	// each for a test-mode account) and EVS_MAX_IDEMPOTENCY_KEYS (per UTC
	// day); 0: no bound.
	MaxStoredBytes     int64
	MaxOutcomes        int
	MaxIdempotencyKeys int
	BatchDeadline      time.Duration // from a batch's start (EVS_BATCH_DEADLINE)
	// CacheTTL is how long a live verdict is reused for the same account
	// and address (EVS_CACHE_TTL; 0 keeps none).
	CacheTTL   time.Duration
	OutcomeTTL time.Duration // EVS_OUTCOME_TTL
	// OutcomeShareDomains scores an accept-all or unchecked mailbox by
	// every account's outcomes for its domain (EVS_OUTCOME_SHARE_DOMAINS).
	OutcomeShareDomains bool
	// SNSTopics, when set, are the only SNS topics whose SES notifications
	// are taken (EVS_SNS_TOPICS). SESAccount is the account the AWS
	// stack's SES notification queue, SESQueueARN, reports for.
	SNSTopics   []string
	SESAccount  string
	SESQueueARN string
	MaxConns    int // EVS_MAX_CONNS
	// MinFreeBytes is the free space of the data directory's file system
	// below which `evs serve` refuses new batches (EVS_MIN_FREE_BYTES).
	MinFreeBytes int64
	MetricsAddr  string // EVS_METRICS_ADDR; "" is off
	// TrustedProxies are the peers whose X-Forwarded-For `evs serve`
	// believes (EVS_TRUSTED_PROXIES).
	TrustedProxies []netip.Prefix
	// DrainTimeout bounds how long `evs serve` lets calls in flight finish
	// once told to stop (EVS_DRAIN_TIMEOUT); negative: no wait, zero: 20 s.
	DrainTimeout    time.Duration
	TLSCert, TLSKey string // EVS_TLS_CERT, EVS_TLS_KEY: both or neither
	// ProviderSessions and ProviderRcptPerMin are the politeness limits
	// per mail provider and egress address, keyed by provider names, class
	// names or "*"; nil means the class defaults.
	ProviderSessions   map[string]int
	ProviderRcptPerMin map[string]int
	Tables             Tables // AWS only
	QueueURL           string // AWS only
	UsagePlanID        string // EVS_USAGE_PLAN_ID
	// PublicURL is the origin clients reach `evs serve` at
	// (EVS_PUBLIC_URL); "" means each call's.
	PublicURL string
	// APIURL and APIKey are where and as whom `evs batch` calls the API.
	APIURL string
	APIKey string
}

// Tables are the DynamoDB table names and the S3 input bucket the SAM
// template passes to the functions; dynamostore.Tables is this type. An
// empty name means the table is not used (`evs keys` needs Keys alone).
type Tables struct {
	Keys        string
	Batches     string
	Results     string
	Idempotency string
	Inputs      string // the S3 bucket of batch inputs and uploads
}

// OSEnv reads the process environment; pass it to FromEnv outside tests.
func OSEnv(name string) string { return os.Getenv(name) }

// Logger returns the JSON logger at the configured level, writing to w:
// the standard library's slog.JSONHandler.
func (c Config) Logger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: c.LogLevel}))
}

// FromEnv reads the configuration with getenv (os.Getenv in production).
// onLambda selects the Lambda defaults: SMTP is off unless a proxy is set,
// because Lambda blocks outbound port 25.
func FromEnv(getenv func(string) string, onLambda bool) (Config, error) {
	c := Config{
		Addr:    cmp.Or(getenv("EVS_ADDR"), DefaultAddr),
		DataDir: cmp.Or(getenv("EVS_DATA_DIR"), "./.data"),
	}
	var errs []error
	if s := getenv("EVS_DNS_SERVERS"); s != "" {
		c.DNSServers = parsed("EVS_DNS_SERVERS", s, ParseDNSServers, &errs)
	}
	c.SMTPProxy = getenv("EVS_SMTP_PROXY")
	c.SMTPProxySecret = getenv("EVS_SMTP_PROXY_SECRET")
	switch {
	case c.SMTPProxySecret == "":
	case !onLambda: // a machine that keeps a file private can keep the variable private too
		errs = append(errs, errors.New("EVS_SMTP_PROXY_SECRET: read on AWS Lambda only; set EVS_SMTP_PROXY instead"))
	case c.SMTPProxy != "":
		errs = append(errs, errors.New("EVS_SMTP_PROXY_SECRET: set it or EVS_SMTP_PROXY, not both"))
	case !strings.HasPrefix(c.SMTPProxySecret, "arn:"):
		errs = append(errs, fmt.Errorf("EVS_SMTP_PROXY_SECRET: %q is not a Secrets Manager secret ARN", c.SMTPProxySecret))
	}
	proxied := c.SMTPProxy != "" || c.SMTPProxySecret != ""
	c.SMTP = strings.ToLower(getenv("EVS_SMTP"))
	switch c.SMTP {
	case "":
		switch {
		case proxied:
			c.SMTP = SMTPProxy
		case onLambda:
			c.SMTP = SMTPOff
		default:
			c.SMTP = SMTPDirect
		}
	case SMTPDirect, SMTPOff:
	case SMTPProxy:
		if !proxied {
			errs = append(errs, errors.New("EVS_SMTP=proxy needs EVS_SMTP_PROXY=socks5://host:port (on Lambda: EVS_SMTP_PROXY_SECRET)"))
		}
	default:
		errs = append(errs, fmt.Errorf("EVS_SMTP: %q is not direct, proxy or off", c.SMTP))
	}
	c.SMTPPort = value(getenv, "EVS_SMTP_PORT", 25, "a port number", func(s string) (int, bool) {
		p, err := strconv.Atoi(s)
		return p, err == nil && p >= 1 && p <= 65535
	}, &errs)
	c.HELO = getenv("EVS_SMTP_HELO")
	if c.HELO == "" {
		h, _ := os.Hostname()
		c.HELO, c.HELOFromHost = cmp.Or(h, "localhost"), true
	}
	c.MailFrom = cmp.Or(getenv("EVS_SMTP_FROM"), "verify@"+c.HELO)
	if s := getenv("EVS_SMTP_EGRESS_IP"); s != "" {
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.Zone() != "" {
			errs = append(errs, fmt.Errorf("EVS_SMTP_EGRESS_IP: %q is not an IP address", s))
		}
		c.EgressIP = ip.Unmap()
	}
	if c.SMTPProxy != "" { // after EVS_SMTP_EGRESS_IP, which a single exit may take
		if err := c.setExits(c.SMTPProxy); err != nil {
			errs = append(errs, fmt.Errorf("EVS_SMTP_PROXY: %w", err))
		}
	}
	c.ExitTimeout = value(getenv, "EVS_SMTP_EXIT_TIMEOUT", 5*time.Second, "a duration of at least 1ms like 5s", durationFrom(time.Millisecond), &errs)
	c.ExitCanary = value(getenv, "EVS_SMTP_EXIT_CANARY", netip.AddrPort{}, "an IP address and port like 192.0.2.25:25", func(s string) (netip.AddrPort, bool) {
		ap, err := netip.ParseAddrPort(s)
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), err == nil && ap.Port() != 0 && ap.Addr().Zone() == ""
	}, &errs)
	c.Blocklists = parsed("EVS_BLOCKLISTS", cmp.Or(getenv("EVS_BLOCKLISTS"), strings.Join(DefaultBlocklists, ",")), parseZones, &errs)
	c.SelfCheckEvery = value(getenv, "EVS_SELFCHECK_EVERY", time.Hour, "a duration of at least 1s like 1h", durationFrom(time.Second), &errs)
	c.Egress = parsed("EVS_EGRESS_ALLOW", getenv("EVS_EGRESS_ALLOW"), ParseEgress, &errs)
	switch s := strings.ToLower(getenv("EVS_RATE_LIMIT")); s {
	case "":
		c.RateLimit = 50
	case "off":
		c.RateLimit = 0
	default:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			errs = append(errs, fmt.Errorf("EVS_RATE_LIMIT: %q is not a positive number or off", s))
		}
		c.RateLimit = f
	}
	if c.AuthTTL = value(getenv, "EVS_AUTH_TTL", 300*time.Second, "a duration like 300s", durationFrom(0), &errs); c.AuthTTL == 0 {
		c.AuthTTL = -1 // disabled
	}
	if s := getenv("EVS_PUBLIC_URL"); s != "" {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("EVS_PUBLIC_URL: %q is not an origin like https://evs.example.com", s))
		} else {
			c.PublicURL = u.Scheme + "://" + u.Host
		}
	}
	c.Retention = time.Duration(value(getenv, "EVS_RETENTION_DAYS", 30, "a positive number of days", wholeFrom[int](1), &errs)) * 24 * time.Hour
	s := strings.ToLower(getenv("EVS_LOG_LEVEL"))
	var known bool
	if c.LogLevel, known = logLevels[s]; !known {
		errs = append(errs, fmt.Errorf("EVS_LOG_LEVEL: %q is not debug, info, warn or error", s))
	}
	c.MaxActiveBatches = value(getenv, "EVS_MAX_ACTIVE_BATCHES", 10, "a positive whole number", wholeFrom[int](1), &errs)
	c.MaxConns = value(getenv, "EVS_MAX_CONNS", 1024, "a positive whole number", wholeFrom[int](1), &errs)
	c.MinFreeBytes = value(getenv, "EVS_MIN_FREE_BYTES", DefaultMinFreeBytes, "a whole number of bytes (0 for no watermark)", wholeFrom[int64](0), &errs)
	c.QuotaAddresses = value(getenv, "EVS_QUOTA_ADDRESSES", 0, "a whole number (0 for no quota)", wholeFrom[int](0), &errs)
	switch c.QuotaPeriod = strings.ToLower(cmp.Or(getenv("EVS_QUOTA_PERIOD"), QuotaMonth)); c.QuotaPeriod {
	case QuotaDay, QuotaMonth:
	default:
		errs = append(errs, fmt.Errorf("EVS_QUOTA_PERIOD: %q is not day or month", c.QuotaPeriod))
	}
	c.QuotaPublishablePercent = value(getenv, "EVS_QUOTA_PUBLISHABLE_PERCENT", 10, "a whole number from 1 to 100", func(s string) (int, bool) {
		n, ok := wholeFrom[int](1)(s)
		return n, ok && n <= 100
	}, &errs)
	c.PublishableRate = value(getenv, "EVS_PUBLISHABLE_RATE", 600, "a positive whole number of calls a minute", wholeFrom[int](1), &errs)
	c.PublishableRatePerAddress = value(getenv, "EVS_PUBLISHABLE_RATE_PER_ADDRESS", 10, "a positive whole number of calls a minute", wholeFrom[int](1), &errs)
	c.MaxStoredBytes = int64(limitOrOff(getenv, "EVS_MAX_STORED_BYTES", DefaultMaxStoredBytes, &errs))
	c.MaxOutcomes = limitOrOff(getenv, "EVS_MAX_OUTCOMES", DefaultMaxOutcomes, &errs)
	c.MaxIdempotencyKeys = limitOrOff(getenv, "EVS_MAX_IDEMPOTENCY_KEYS", DefaultMaxIdempotencyKeys, &errs)
	c.BatchDeadline = value(getenv, "EVS_BATCH_DEADLINE", 24*time.Hour, "a positive duration like 24h", durationFrom(1), &errs)
	c.CacheTTL = value(getenv, "EVS_CACHE_TTL", 24*time.Hour, "a duration like 24h (0 turns the cache off)", durationFrom(0), &errs)
	c.OutcomeTTL = outcomeTTL(getenv, &errs)
	c.OutcomeShareDomains = outcomeShareDomains(getenv, &errs)
	c.SNSTopics = snsTopics(getenv, &errs)
	c.SESAccount, c.SESQueueARN = getenv("EVS_SES_ACCOUNT"), getenv("EVS_SES_QUEUE_ARN")
	if c.MetricsAddr = getenv("EVS_METRICS_ADDR"); c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("EVS_METRICS_ADDR: %q is not host:port like 127.0.0.1:9090", c.MetricsAddr))
		}
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("EVS_ADDR: %q is not host:port like 127.0.0.1:8080", c.Addr))
	}
	serveOps(getenv, &c, &errs)
	c.ProviderSessions = providerLimits(getenv, "EVS_PROVIDER_SESSIONS", &errs)
	c.ProviderRcptPerMin = providerLimits(getenv, "EVS_PROVIDER_RCPT_PER_MIN", &errs)
	c.Tables = Tables{
		Keys:        getenv("EVS_KEYS_TABLE"),
		Batches:     getenv("EVS_BATCHES_TABLE"),
		Results:     getenv("EVS_RESULTS_TABLE"),
		Idempotency: getenv("EVS_IDEMPOTENCY_TABLE"),
		Inputs:      getenv("EVS_INPUT_BUCKET"),
	}
	c.QueueURL = getenv("EVS_QUEUE_URL")
	c.UsagePlanID = getenv("EVS_USAGE_PLAN_ID")
	c.APIURL = getenv("EVS_URL")
	c.APIKey = getenv("EVS_API_KEY")
	return c, errors.Join(errs...)
}

var logLevels = map[string]slog.Level{"": slog.LevelInfo, "info": slog.LevelInfo, "debug": slog.LevelDebug,
	"warn": slog.LevelWarn, "warning": slog.LevelWarn, "error": slog.LevelError}

// SetSMTPProxy sets the SOCKS5 exits fetched from the secret that
// EVS_SMTP_PROXY_SECRET names: one URL, or a comma-separated list
// (SMTPExit). The error never quotes the value, which may hold passwords.
func (c *Config) SetSMTPProxy(proxyURL string) error {
	if err := c.setExits(proxyURL); err != nil {
		return fmt.Errorf("EVS_SMTP_PROXY_SECRET: the secret's value: %w", err)
	}
	c.SMTPProxy = proxyURL
	return nil
}

// Defaults of the EVS_* variables of the same names.
const (
	// DefaultMinFreeBytes leaves room for the work already accepted to
	// finish and for SQLite's checkpoints.
	DefaultMinFreeBytes = 1 << 30
	// DefaultMaxStoredBytes holds ten lists of a million addresses with
	// their rows and results.
	DefaultMaxStoredBytes = 4 << 30
	// DefaultMaxOutcomes is about 640 MB in `evs serve`'s store.
	DefaultMaxOutcomes = 1_000_000
	// DefaultMaxIdempotencyKeys (a day's new keys) keeps one account's
	// records under about 290 MB (BenchmarkStorageBytes), while a new key
	// on every call still allows 3 calls a second all day.
	DefaultMaxIdempotencyKeys = 250_000
)

// value reads variable name: def when it is unset, else what parse makes
// of it, or an error saying it is not want.
func value[T any](getenv func(string) string, name string, def T, want string, parse func(string) (T, bool), errs *[]error) T {
	s := getenv(name)
	if s == "" {
		return def
	}
	v, ok := parse(s)
	if !ok {
		*errs = append(*errs, fmt.Errorf("%s: %q is not %s", name, s, want))
		return def
	}
	return v
}

// parsed is what parse makes of s, the value of variable name; parse's
// error says what is wrong.
func parsed[T any](name, s string, parse func(string) (T, error), errs *[]error) T {
	v, err := parse(s)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %w", name, err))
	}
	return v
}

func durationFrom(least time.Duration) func(string) (time.Duration, bool) {
	return func(s string) (time.Duration, bool) {
		d, err := time.ParseDuration(s)
		return d, err == nil && d >= least
	}
}

func wholeFrom[T int | int64](least T) func(string) (T, bool) {
	return func(s string) (T, bool) {
		n, err := strconv.ParseInt(s, 10, 64)
		return T(n), err == nil && T(n) >= least
	}
}

// limitOrOff reads a per-account limit: a whole number, with 0 or "off"
// for no limit.
func limitOrOff(getenv func(string) string, name string, def int, errs *[]error) int {
	s := strings.ToLower(getenv(name))
	switch s {
	case "":
		return def
	case "off":
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		*errs = append(*errs, fmt.Errorf("%s: %q is not a whole number, or 0/off for no limit", name, s))
		return def
	}
	return n
}

// DefaultAddr is where evs serve listens without EVS_ADDR.
const DefaultAddr = "127.0.0.1:8080"

// DefaultBlocklists are the DNS blocklists receivers consult most. Spamhaus
// refuses queries through large public resolvers, which the self-check
// then reports as a refusal, never as clean.
var DefaultBlocklists = []string{"zen.spamhaus.org", "bl.spamcop.net", "b.barracudacentral.org"}

// parseZones reads a comma-separated list of DNS zones; "none" is none.
func parseZones(s string) ([]string, error) {
	if strings.EqualFold(strings.TrimSpace(s), "none") {
		return nil, nil
	}
	var zones []string
	for _, z := range strings.Split(s, ",") {
		z = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(z), "."))
		if z == "" || len(z) > 200 || !zoneRe.MatchString(z) {
			return nil, fmt.Errorf("%q is not a DNS zone like zen.spamhaus.org (or none)", z)
		}
		zones = append(zones, z)
	}
	return zones, nil
}

var zoneRe = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
