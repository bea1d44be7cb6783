// Package config reads the service's configuration from the environment
// (contract, sections 7 and 9): the same variables for `evs` and the Lambda
// functions. It is the only reader of the environment: every variable is
// read and validated here, once, and a bad value is reported as one line
// naming the variable and the form it accepts. It also says which build
// is running (BuildInfo): like the environment, a fact of the process that
// is read once at start and never changes. And it holds the egress policy
// (egress.go) that EVS_EGRESS_ALLOW sets, which every component that dials
// for a tenant's input shares: SMTP, webhooks, callback URLs.
//
// It imports nothing heavy (no engine, no AWS) and nothing else of ours, so
// every package can link it; verify.Build turns the engine part into an
// engine.
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
	// Lambda the value of the secret named by EVS_SMTP_PROXY_SECRET, set
	// with SetSMTPProxy). It may hold passwords: never log it.
	SMTPProxy string
	// SMTPExits is SMTPProxy read (SMTPExit): what the dialer uses.
	SMTPExits []SMTPExit
	// SMTPProxySecret is the ARN of the Secrets Manager secret whose value
	// is SMTPProxy (EVS_SMTP_PROXY_SECRET, Lambda only). The composition
	// root fetches it and calls SetSMTPProxy: this package stays free of
	// AWS, and the credentials never sit in an environment variable.
	SMTPProxySecret string
	// ExitTimeout bounds each SOCKS5 handshake, up to the reply to
	// CONNECT, and each health probe of an exit (EVS_SMTP_EXIT_TIMEOUT).
	ExitTimeout time.Duration
	// ExitCanary is where an exit's health probe asks it to CONNECT
	// (EVS_SMTP_EXIT_CANARY); the zero value is the exit's own loopback.
	ExitCanary netip.AddrPort
	SMTPPort   int
	HELO       string
	MailFrom   string
	// RateLimit is requests per second per account; 0 means off.
	RateLimit float64
	// AuthTTL is the local gateway's authorizer cache TTL.
	AuthTTL time.Duration
	// Retention is how long batches and results are kept.
	Retention time.Duration
	// Egress is the policy for connections that tenants' input names
	// (SMTP probes): EVS_EGRESS_ALLOW. nil, the zero value, refuses every
	// special-purpose range.
	Egress *EgressPolicy
	// EgressIP is the public address SMTP probes leave from, directly or
	// through the SOCKS exit (EVS_SMTP_EGRESS_IP); the zero Addr when not
	// known. The self-check looks it up in Blocklists and checks that it
	// and HELO name each other in DNS.
	EgressIP netip.Addr
	// Blocklists are the DNS blocklist zones the self-check asks about
	// EgressIP (EVS_BLOCKLISTS, default DefaultBlocklists; "none": none).
	Blocklists []string
	// SelfCheckEvery is how often the egress self-check runs after the
	// first (EVS_SELFCHECK_EVERY, default 1h): on evs serve a ticker; on
	// AWS each instance that probes, when its findings are older.
	SelfCheckEvery time.Duration
	// HELOFromHost is true when HELO was not configured and the host name
	// is used instead (evs serve warns about it).
	HELOFromHost bool
	// LogLevel is EVS_LOG_LEVEL: debug, info (default), warn or error.
	LogLevel slog.Level
	// MaxActiveBatches is how many batches an account may have queued or
	// running at once (EVS_MAX_ACTIVE_BATCHES).
	MaxActiveBatches int
	// QuotaAddresses is how many addresses an account may have verified per
	// QuotaPeriod (EVS_QUOTA_ADDRESSES); 0 means no quota.
	QuotaAddresses int
	// QuotaPeriod is the quota's calendar period in UTC, QuotaDay or
	// QuotaMonth (EVS_QUOTA_PERIOD, default month).
	QuotaPeriod string
	// QuotaPublishablePercent is the share of QuotaAddresses, in percent,
	// an account's publishable keys may use together
	// (EVS_QUOTA_PUBLISHABLE_PERCENT, 1 to 100, default 10).
	QuotaPublishablePercent int
	// PublishableRate and PublishableRatePerAddress are a publishable
	// key's calls a minute, from all client addresses and from one,
	// unless the key has its own (EVS_PUBLISHABLE_RATE, default 600;
	// EVS_PUBLISHABLE_RATE_PER_ADDRESS, default 10).
	PublishableRate, PublishableRatePerAddress int
	// MaxStoredBytes bounds the bytes an account makes the service keep:
	// lists' rows, results, exports, outcomes, uploads
	// (EVS_MAX_STORED_BYTES, default DefaultMaxStoredBytes; 0: no bound);
	// a test-mode account has a tenth of it.
	MaxStoredBytes int64
	// MaxOutcomes bounds the outcomes an account keeps (EVS_MAX_OUTCOMES,
	// default DefaultMaxOutcomes; 0: no bound); a test-mode account has a
	// tenth of it.
	MaxOutcomes int
	// MaxIdempotencyKeys bounds the new Idempotency-Keys an account may use
	// per UTC day (EVS_MAX_IDEMPOTENCY_KEYS, default
	// DefaultMaxIdempotencyKeys; 0: no bound).
	MaxIdempotencyKeys int
	// BatchDeadline is a batch's time limit from its start
	// (EVS_BATCH_DEADLINE).
	BatchDeadline time.Duration
	// CacheTTL is how long a live verdict is reused for the same account
	// and address (EVS_CACHE_TTL, default 24h; 0 keeps none; contract,
	// section 12).
	CacheTTL time.Duration
	// OutcomeTTL is how long a reported outcome is kept after it was
	// received (EVS_OUTCOME_TTL, default 365 days; contract, section 18).
	OutcomeTTL time.Duration
	// OutcomeShareDomains, when on, scores an accept-all or unchecked
	// mailbox by every account's outcomes for its domain, as counts,
	// rather than the account's own (EVS_OUTCOME_SHARE_DOMAINS, default
	// off; contract, section 18).
	OutcomeShareDomains bool
	// SNSTopics, when set, are the only SNS topics whose SES notifications
	// are taken (EVS_SNS_TOPICS, comma-separated TopicArns). SESAccount
	// is the name of the account the AWS stack's SES notification queue
	// reports for (EVS_SES_ACCOUNT), SESQueueARN that queue's ARN
	// (EVS_SES_QUEUE_ARN): the worker tells its messages from work by it.
	SNSTopics   []string
	SESAccount  string
	SESQueueARN string
	// MaxConns caps the open HTTP connections of `evs serve` (EVS_MAX_CONNS).
	MaxConns int
	// MinFreeBytes is the free space of the data directory's file system
	// below which `evs serve` refuses new batches (EVS_MIN_FREE_BYTES,
	// default DefaultMinFreeBytes; 0: no watermark).
	MinFreeBytes int64
	// MetricsAddr is the listen address of the Prometheus endpoint; empty
	// means off (EVS_METRICS_ADDR).
	MetricsAddr string
	// TrustedProxies are the peers whose X-Forwarded-For `evs serve`
	// believes (EVS_TRUSTED_PROXIES); empty: none, the peer is the client.
	TrustedProxies []netip.Prefix
	// DrainTimeout bounds how long `evs serve` lets calls in flight finish
	// once told to stop (EVS_DRAIN_TIMEOUT, default 20 s); negative: no
	// wait (EVS_DRAIN_TIMEOUT=0), zero: the default.
	DrainTimeout time.Duration
	// TLSCert and TLSKey are the PEM files `evs serve` answers HTTPS with
	// (EVS_TLS_CERT, EVS_TLS_KEY): both or neither.
	TLSCert, TLSKey string
	// ProviderSessions and ProviderRcptPerMin are the politeness limits
	// per mail provider and egress address (EVS_PROVIDER_SESSIONS,
	// EVS_PROVIDER_RCPT_PER_MIN): keys are provider names, class names
	// (large, gateway, other) or "*"; nil means the class defaults.
	ProviderSessions   map[string]int
	ProviderRcptPerMin map[string]int
	// Tables names the DynamoDB tables (AWS only; from template.yaml).
	Tables Tables
	// QueueURL is the SQS work queue (AWS only; EVS_QUEUE_URL).
	QueueURL string
	// UsagePlanID is the API Gateway usage plan `evs keys create` adds keys
	// to (EVS_USAGE_PLAN_ID).
	UsagePlanID string
	// PublicURL is the origin clients reach `evs serve` at, as
	// https://host[:port] (EVS_PUBLIC_URL): upload URLs are made with it.
	// Empty means the origin each call came to (its Host header).
	PublicURL string
	// APIURL and APIKey are where and as whom `evs batch` calls the API
	// (EVS_URL, EVS_API_KEY).
	APIURL string
	APIKey string
}

// Tables are the DynamoDB table names and the S3 input bucket the SAM
// template passes to the functions. Its fields match dynamostore.Tables,
// so one converts to the other.
type Tables struct {
	Keys        string
	Batches     string
	Results     string
	Idempotency string
	Inputs      string
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
		servers, err := ParseDNSServers(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("EVS_DNS_SERVERS: %w", err))
		}
		c.DNSServers = servers
	}
	c.SMTPProxy = getenv("EVS_SMTP_PROXY")
	c.SMTPProxySecret = getenv("EVS_SMTP_PROXY_SECRET")
	switch {
	case c.SMTPProxySecret == "":
	case !onLambda:
		// Only the Lambda functions fetch the secret; a machine that can
		// keep a file private can keep the variable private too.
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
		c.HELO, c.HELOFromHost = h, true
		c.HELO = cmp.Or(c.HELO, "localhost")
	}
	c.MailFrom = cmp.Or(getenv("EVS_SMTP_FROM"), "verify@"+c.HELO)
	if s := getenv("EVS_SMTP_EGRESS_IP"); s != "" {
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.Zone() != "" {
			errs = append(errs, fmt.Errorf("EVS_SMTP_EGRESS_IP: %q is not an IP address", s))
		}
		c.EgressIP = ip.Unmap()
	}
	if c.SMTPProxy != "" {
		// After EVS_SMTP_EGRESS_IP, which a single exit may take as its
		// address.
		if err := c.setExits(c.SMTPProxy); err != nil {
			errs = append(errs, fmt.Errorf("EVS_SMTP_PROXY: %w", err))
		}
	}
	c.ExitTimeout = value(getenv, "EVS_SMTP_EXIT_TIMEOUT", 5*time.Second, "a duration of at least 1ms like 5s", durationFrom(time.Millisecond), &errs)
	c.ExitCanary = value(getenv, "EVS_SMTP_EXIT_CANARY", netip.AddrPort{}, "an IP address and port like 192.0.2.25:25", func(s string) (netip.AddrPort, bool) {
		ap, err := netip.ParseAddrPort(s)
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), err == nil && ap.Port() != 0 && ap.Addr().Zone() == ""
	}, &errs)
	bl, err := parseZones(cmp.Or(getenv("EVS_BLOCKLISTS"), strings.Join(DefaultBlocklists, ",")))
	if err != nil {
		errs = append(errs, fmt.Errorf("EVS_BLOCKLISTS: %w", err))
	}
	c.Blocklists = bl
	c.SelfCheckEvery = value(getenv, "EVS_SELFCHECK_EVERY", time.Hour, "a duration of at least 1s like 1h", durationFrom(time.Second), &errs)
	pol, err := ParseEgress(getenv("EVS_EGRESS_ALLOW"))
	if err != nil {
		errs = append(errs, fmt.Errorf("EVS_EGRESS_ALLOW: %w", err))
	}
	c.Egress = pol
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
	switch s := strings.ToLower(getenv("EVS_LOG_LEVEL")); s {
	case "", "info":
		c.LogLevel = slog.LevelInfo
	case "debug":
		c.LogLevel = slog.LevelDebug
	case "warn", "warning":
		c.LogLevel = slog.LevelWarn
	case "error":
		c.LogLevel = slog.LevelError
	default:
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

// DefaultMinFreeBytes is EVS_MIN_FREE_BYTES's default, 1 GiB: room for
// the batches and results already accepted to finish (a 50,000-address
// batch with its results takes about 8 MiB) and for SQLite's checkpoints.
const DefaultMinFreeBytes = 1 << 30

// DefaultMaxStoredBytes is EVS_MAX_STORED_BYTES's default, 4 GiB: ten
// lists of a million addresses with their rows and results, or forty
// of the largest uploads, kept at once.
const DefaultMaxStoredBytes = 4 << 30

// DefaultMaxOutcomes is EVS_MAX_OUTCOMES's default: a million outcomes
// per account, about 640 MB in `evs serve`'s store with their indexes.
const DefaultMaxOutcomes = 1_000_000

// DefaultMaxIdempotencyKeys is EVS_MAX_IDEMPOTENCY_KEYS's default: new
// Idempotency-Keys per account per UTC day. A record is kept 24 h and
// takes about 1,160 bytes with a /v1/verify reply (BenchmarkStorageBytes),
// so one account's records stay under about 290 MB, while a client with a
// new key on every call still makes about 3 calls a second all day.
const DefaultMaxIdempotencyKeys = 250_000

// value reads variable name: def when it is unset, else what parse makes
// of it, and an error saying it is not want when parse refuses it.
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

// durationFrom parses a duration of at least least.
func durationFrom(least time.Duration) func(string) (time.Duration, bool) {
	return func(s string) (time.Duration, bool) {
		d, err := time.ParseDuration(s)
		return d, err == nil && d >= least
	}
}

// wholeFrom parses a whole number of at least least.
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

// DefaultBlocklists are the DNS blocklists receivers consult most, which
// the self-check asks about the egress address by default. Spamhaus
// answers no query that comes through a large public resolver: the
// self-check then says the list refused it, never that we are clean.
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

// zoneRe matches a DNS name of two labels or more.
var zoneRe = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
