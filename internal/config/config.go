// Package config reads the service's configuration from the environment
// (contract, section 7) — the same variables for `evs` and the Lambda
// functions — and builds the verification engine it describes.
package config

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/egress"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// SMTP modes of EVS_SMTP.
const (
	SMTPDirect = "direct"
	SMTPProxy  = "proxy"
	SMTPOff    = "off"
)

// Config is the service's configuration.
type Config struct {
	Addr       string
	DataDir    string
	DNSServers []string
	SMTP       string
	SMTPProxy  string
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
	Egress *egress.Policy
	// HELOFromHost is true when HELO was not configured and the host name
	// is used instead (evs serve warns about it).
	HELOFromHost bool
}

// FromEnv reads the configuration with getenv (os.Getenv in production).
// onLambda selects the Lambda defaults: SMTP is off unless a proxy is set,
// because Lambda blocks outbound port 25.
func FromEnv(getenv func(string) string, onLambda bool) (Config, error) {
	c := Config{
		Addr:     or(getenv("EVS_ADDR"), "127.0.0.1:8080"),
		DataDir:  or(getenv("EVS_DATA_DIR"), "./.data"),
		SMTPPort: 25,
		AuthTTL:  300 * time.Second,
	}
	var errs []error
	if s := getenv("EVS_DNS_SERVERS"); s != "" {
		servers, err := dnscheck.ParseServers(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("EVS_DNS_SERVERS: %w", err))
		}
		c.DNSServers = servers
	}
	c.SMTPProxy = getenv("EVS_SMTP_PROXY")
	if c.SMTPProxy != "" {
		u, err := url.Parse(c.SMTPProxy)
		if err != nil || u.Scheme != "socks5" || u.Host == "" {
			errs = append(errs, errors.New("EVS_SMTP_PROXY: must be socks5://host:port"))
		}
	}
	c.SMTP = strings.ToLower(getenv("EVS_SMTP"))
	switch c.SMTP {
	case "":
		switch {
		case c.SMTPProxy != "":
			c.SMTP = SMTPProxy
		case onLambda:
			c.SMTP = SMTPOff
		default:
			c.SMTP = SMTPDirect
		}
	case SMTPDirect, SMTPOff:
	case SMTPProxy:
		if c.SMTPProxy == "" {
			errs = append(errs, errors.New("EVS_SMTP=proxy needs EVS_SMTP_PROXY=socks5://host:port"))
		}
	default:
		errs = append(errs, fmt.Errorf("EVS_SMTP: %q is not direct, proxy or off", c.SMTP))
	}
	if s := getenv("EVS_SMTP_PORT"); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil || p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("EVS_SMTP_PORT: %q is not a port number", s))
		}
		c.SMTPPort = p
	}
	c.HELO = getenv("EVS_SMTP_HELO")
	if c.HELO == "" {
		h, _ := os.Hostname()
		c.HELO, c.HELOFromHost = h, true
		if c.HELO == "" {
			c.HELO = "localhost"
		}
	}
	c.MailFrom = or(getenv("EVS_SMTP_FROM"), "verify@"+c.HELO)
	pol, err := egress.Parse(getenv("EVS_EGRESS_ALLOW"))
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
		if err != nil || f <= 0 {
			errs = append(errs, fmt.Errorf("EVS_RATE_LIMIT: %q is not a positive number or off", s))
		}
		c.RateLimit = f
	}
	if s := getenv("EVS_AUTH_TTL"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("EVS_AUTH_TTL: %q is not a duration like 300s", s))
		}
		c.AuthTTL = d
		if d == 0 {
			c.AuthTTL = -1 // disabled
		}
	}
	days := 30
	if s := getenv("EVS_RETENTION_DAYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("EVS_RETENTION_DAYS: %q is not a positive number of days", s))
		}
		days = n
	}
	c.Retention = time.Duration(days) * 24 * time.Hour
	return c, errors.Join(errs...)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Engine builds the verification engine the configuration describes.
func (c Config) Engine() (*verify.Engine, *dnscheck.Resolver, error) {
	res, err := dnscheck.New(dnscheck.Config{Servers: c.DNSServers})
	if err != nil {
		return nil, nil, err
	}
	ec := verify.Config{Resolver: res}
	switch c.SMTP {
	case SMTPOff:
		ec.SMTPOffDetail = "SMTP probing is off here (EVS_SMTP=off)"
	default:
		// The policy is checked before every dial and again, on direct
		// dials, on the address the socket connects to.
		var dialer smtpprobe.ContextDialer = &net.Dialer{Control: c.Egress.Control}
		if c.SMTP == SMTPProxy {
			// The proxy is the operator's, often on a private network:
			// reaching it is not subject to the policy; what it is asked
			// to CONNECT to is.
			dialer, err = smtpprobe.NewSOCKS5Dialer(c.SMTPProxy, &net.Dialer{}, c.Egress)
			if err != nil {
				return nil, nil, err
			}
		}
		p, err := smtpprobe.New(smtpprobe.Config{
			HELO: c.HELO, MailFrom: c.MailFrom, Port: c.SMTPPort,
			Resolver: res, Dialer: dialer, Egress: c.Egress,
		})
		if err != nil {
			return nil, nil, err
		}
		ec.Prober = verify.SMTP(p)
	}
	e, err := verify.New(ec)
	if err != nil {
		return nil, nil, err
	}
	return e, res, nil
}

// CheckHELO warns when the EHLO name cannot identify this host: receiving
// servers check that it resolves (and ideally matches the PTR of the
// probing IP), and refuse or list hosts whose names do not.
func (c Config) CheckHELO(ctx context.Context, lookup func(ctx context.Context, host string) ([]string, error)) string {
	if c.SMTP == SMTPOff {
		return ""
	}
	if c.HELOFromHost {
		return fmt.Sprintf("EVS_SMTP_HELO is not set; probing as %q. Set it to a name that resolves to this host's public IP and whose PTR points back (see README: SMTP probing).", c.HELO)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if addrs, err := lookup(ctx, c.HELO); err != nil || len(addrs) == 0 {
		return fmt.Sprintf("EVS_SMTP_HELO %q does not resolve; receiving servers may refuse our probes (see README: SMTP probing).", c.HELO)
	}
	return ""
}
