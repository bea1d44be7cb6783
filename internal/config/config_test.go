package config_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/config"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestFromEnv(t *testing.T) {
	cases := []struct {
		name     string
		vars     map[string]string
		lambda   bool
		check    func(t *testing.T, c config.Config)
		errMatch string
	}{
		{name: "defaults", vars: map[string]string{"EVS_SMTP_HELO": "probe.example.net"}, check: func(t *testing.T, c config.Config) {
			if c.Addr != "127.0.0.1:8080" || c.DataDir != "./.data" || c.SMTP != "direct" || c.SMTPPort != 25 ||
				c.RateLimit != 50 || c.AuthTTL != 300*time.Second || c.Retention != 30*24*time.Hour ||
				c.MailFrom != "verify@probe.example.net" || c.HELOFromHost {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "lambda defaults to off", lambda: true, vars: map[string]string{}, check: func(t *testing.T, c config.Config) {
			if c.SMTP != "off" {
				t.Fatalf("SMTP %q", c.SMTP)
			}
		}},
		{name: "lambda with proxy", lambda: true, vars: map[string]string{"EVS_SMTP_PROXY": "socks5://10.0.0.1:1080"}, check: func(t *testing.T, c config.Config) {
			if c.SMTP != "proxy" {
				t.Fatalf("SMTP %q", c.SMTP)
			}
		}},
		{name: "everything set", vars: map[string]string{
			"EVS_ADDR": "0.0.0.0:9000", "EVS_DATA_DIR": "/tmp/x", "EVS_DNS_SERVERS": "127.0.0.1:5353,[::1]:53",
			"EVS_SMTP": "off", "EVS_SMTP_PORT": "2525", "EVS_SMTP_HELO": "h.example", "EVS_SMTP_FROM": "v@h.example",
			"EVS_RATE_LIMIT": "off", "EVS_AUTH_TTL": "0", "EVS_RETENTION_DAYS": "7",
		}, check: func(t *testing.T, c config.Config) {
			if c.Addr != "0.0.0.0:9000" || len(c.DNSServers) != 2 || c.SMTP != "off" || c.SMTPPort != 2525 ||
				c.MailFrom != "v@h.example" || c.RateLimit != 0 || c.AuthTTL >= 0 || c.Retention != 7*24*time.Hour {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "lambda with proxy secret", lambda: true, vars: map[string]string{"EVS_SMTP_PROXY_SECRET": "arn:aws:secretsmanager:us-east-1:123456789012:secret:evs-proxy-AbCdEf"}, check: func(t *testing.T, c config.Config) {
			// Proxy mode, but no proxy until the composition root fetched
			// the secret: verify.Build then refuses to build a dialer.
			if c.SMTP != "proxy" || c.SMTPProxy != "" || c.SMTPProxySecret != "arn:aws:secretsmanager:us-east-1:123456789012:secret:evs-proxy-AbCdEf" {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "proxy secret off Lambda", vars: map[string]string{"EVS_SMTP_PROXY_SECRET": "arn:aws:secretsmanager:us-east-1:123456789012:secret:p-AbCdEf"}, errMatch: "EVS_SMTP_PROXY_SECRET: read on AWS Lambda only"},
		{name: "proxy and proxy secret", lambda: true, vars: map[string]string{"EVS_SMTP_PROXY": "socks5://10.0.0.1:1080", "EVS_SMTP_PROXY_SECRET": "arn:aws:secretsmanager:us-east-1:123456789012:secret:p-AbCdEf"}, errMatch: "not both"},
		{name: "proxy secret not an ARN", lambda: true, vars: map[string]string{"EVS_SMTP_PROXY_SECRET": "socks5://u:p@10.0.0.1:1080"}, errMatch: "EVS_SMTP_PROXY_SECRET"},
		{name: "proxy mode with proxy secret", lambda: true, vars: map[string]string{"EVS_SMTP": "proxy", "EVS_SMTP_PROXY_SECRET": "arn:aws:secretsmanager:us-east-1:123456789012:secret:p-AbCdEf"}, check: func(t *testing.T, c config.Config) {
			if c.SMTP != "proxy" {
				t.Fatalf("SMTP %q", c.SMTP)
			}
		}},
		{name: "self-check defaults", vars: map[string]string{}, check: func(t *testing.T, c config.Config) {
			if c.EgressIP.IsValid() || !slices.Equal(c.Blocklists, config.DefaultBlocklists) {
				t.Fatalf("egress %v, lists %v", c.EgressIP, c.Blocklists)
			}
		}},
		{name: "self-check set", vars: map[string]string{"EVS_SMTP_EGRESS_IP": "::ffff:192.0.2.7", "EVS_BLOCKLISTS": " bl.example. ,Zen.Spamhaus.org"}, check: func(t *testing.T, c config.Config) {
			if c.EgressIP != netip.MustParseAddr("192.0.2.7") || !slices.Equal(c.Blocklists, []string{"bl.example", "zen.spamhaus.org"}) {
				t.Fatalf("egress %v, lists %v", c.EgressIP, c.Blocklists)
			}
		}},
		{name: "no blocklists", vars: map[string]string{"EVS_BLOCKLISTS": "none"}, check: func(t *testing.T, c config.Config) {
			if c.Blocklists != nil {
				t.Fatalf("lists %v", c.Blocklists)
			}
		}},
		{name: "exit timeout and canary", vars: map[string]string{"EVS_SMTP_EXIT_TIMEOUT": "250ms", "EVS_SMTP_EXIT_CANARY": "[::ffff:192.0.2.25]:25"}, check: func(t *testing.T, c config.Config) {
			if c.ExitTimeout != 250*time.Millisecond || c.ExitCanary != netip.MustParseAddrPort("192.0.2.25:25") {
				t.Fatalf("exit timeout %v, canary %v", c.ExitTimeout, c.ExitCanary)
			}
		}},
		{name: "exit timeout and canary defaults", vars: map[string]string{}, check: func(t *testing.T, c config.Config) {
			if c.ExitTimeout != 5*time.Second || c.ExitCanary.IsValid() {
				t.Fatalf("exit timeout %v, canary %v", c.ExitTimeout, c.ExitCanary)
			}
		}},
		{name: "exit timeout negative", vars: map[string]string{"EVS_SMTP_EXIT_TIMEOUT": "-1s"}, errMatch: "EVS_SMTP_EXIT_TIMEOUT"},
		{name: "exit canary a name", vars: map[string]string{"EVS_SMTP_EXIT_CANARY": "mx.example:25"}, errMatch: "EVS_SMTP_EXIT_CANARY"},
		{name: "exit canary without a port", vars: map[string]string{"EVS_SMTP_EXIT_CANARY": "192.0.2.25:0"}, errMatch: "EVS_SMTP_EXIT_CANARY"},
		{name: "egress ip not an address", vars: map[string]string{"EVS_SMTP_EGRESS_IP": "mail.example"}, errMatch: "EVS_SMTP_EGRESS_IP"},
		{name: "blocklist not a zone", vars: map[string]string{"EVS_BLOCKLISTS": "zen.spamhaus.org,,x"}, errMatch: "EVS_BLOCKLISTS"},
		{name: "no address quota by default", vars: map[string]string{}, check: func(t *testing.T, c config.Config) {
			if c.QuotaAddresses != 0 || c.QuotaPeriod != config.QuotaMonth || c.QuotaPublishablePercent != 10 || c.PublishableRate != 600 || c.PublishableRatePerAddress != 10 {
				t.Fatalf("quota %d per %q, publishable %d%%, %d/%d a minute", c.QuotaAddresses, c.QuotaPeriod, c.QuotaPublishablePercent, c.PublishableRate, c.PublishableRatePerAddress)
			}
		}},
		{name: "address quota", vars: map[string]string{"EVS_QUOTA_ADDRESSES": "5000", "EVS_QUOTA_PERIOD": "Day", "EVS_QUOTA_PUBLISHABLE_PERCENT": "100"}, check: func(t *testing.T, c config.Config) {
			if c.QuotaAddresses != 5000 || c.QuotaPeriod != config.QuotaDay || c.QuotaPublishablePercent != 100 {
				t.Fatalf("quota %d per %q, publishable %d%%", c.QuotaAddresses, c.QuotaPeriod, c.QuotaPublishablePercent)
			}
		}},
		{name: "publishable rates", vars: map[string]string{"EVS_PUBLISHABLE_RATE": "3000", "EVS_PUBLISHABLE_RATE_PER_ADDRESS": "20"}, check: func(t *testing.T, c config.Config) {
			if c.PublishableRate != 3000 || c.PublishableRatePerAddress != 20 {
				t.Fatalf("publishable rates %d/%d, want 3000/20", c.PublishableRate, c.PublishableRatePerAddress)
			}
		}},
		{name: "publishable rate of none", vars: map[string]string{"EVS_PUBLISHABLE_RATE": "0"}, errMatch: "EVS_PUBLISHABLE_RATE"},
		{name: "publishable rate per address not a number", vars: map[string]string{"EVS_PUBLISHABLE_RATE_PER_ADDRESS": "ten"}, errMatch: "EVS_PUBLISHABLE_RATE_PER_ADDRESS"},
		{name: "publishable share over 100", vars: map[string]string{"EVS_QUOTA_PUBLISHABLE_PERCENT": "101"}, errMatch: "EVS_QUOTA_PUBLISHABLE_PERCENT"},
		{name: "publishable share of none", vars: map[string]string{"EVS_QUOTA_PUBLISHABLE_PERCENT": "0"}, errMatch: "EVS_QUOTA_PUBLISHABLE_PERCENT"},
		{name: "bad quota", vars: map[string]string{"EVS_QUOTA_ADDRESSES": "-1"}, errMatch: "EVS_QUOTA_ADDRESSES"},
		{name: "free-space watermark", vars: map[string]string{"EVS_MIN_FREE_BYTES": "0"}, check: func(t *testing.T, c config.Config) {
			if c.MinFreeBytes != 0 {
				t.Fatalf("MinFreeBytes %d, want 0 (off)", c.MinFreeBytes)
			}
		}},
		{name: "default free-space watermark", check: func(t *testing.T, c config.Config) {
			if c.MinFreeBytes != 1<<30 {
				t.Fatalf("MinFreeBytes %d, want 1 GiB", c.MinFreeBytes)
			}
		}},
		{name: "bad free-space watermark", vars: map[string]string{"EVS_MIN_FREE_BYTES": "1GB"}, errMatch: "EVS_MIN_FREE_BYTES"},
		{name: "default per-account storage limits", check: func(t *testing.T, c config.Config) {
			if c.MaxStoredBytes != 4<<30 || c.MaxOutcomes != 1_000_000 || c.MaxIdempotencyKeys != 250_000 {
				t.Fatalf("stored bytes %d, outcomes %d, idempotency keys %d", c.MaxStoredBytes, c.MaxOutcomes, c.MaxIdempotencyKeys)
			}
		}},
		{name: "per-account storage limits", vars: map[string]string{"EVS_MAX_STORED_BYTES": "1000", "EVS_MAX_OUTCOMES": "7", "EVS_MAX_IDEMPOTENCY_KEYS": "Off"}, check: func(t *testing.T, c config.Config) {
			if c.MaxStoredBytes != 1000 || c.MaxOutcomes != 7 || c.MaxIdempotencyKeys != 0 {
				t.Fatalf("stored bytes %d, outcomes %d, idempotency keys %d", c.MaxStoredBytes, c.MaxOutcomes, c.MaxIdempotencyKeys)
			}
		}},
		{name: "stored bytes and outcomes off", vars: map[string]string{"EVS_MAX_STORED_BYTES": "0", "EVS_MAX_OUTCOMES": "off"}, check: func(t *testing.T, c config.Config) {
			if c.MaxStoredBytes != 0 || c.MaxOutcomes != 0 {
				t.Fatalf("stored bytes %d, outcomes %d, want 0 (off)", c.MaxStoredBytes, c.MaxOutcomes)
			}
		}},
		{name: "bad stored bytes", vars: map[string]string{"EVS_MAX_STORED_BYTES": "4GB"}, errMatch: "EVS_MAX_STORED_BYTES"},
		{name: "bad outcomes cap", vars: map[string]string{"EVS_MAX_OUTCOMES": "-1"}, errMatch: "EVS_MAX_OUTCOMES"},
		{name: "bad idempotency keys", vars: map[string]string{"EVS_MAX_IDEMPOTENCY_KEYS": "-1"}, errMatch: "EVS_MAX_IDEMPOTENCY_KEYS"},
		{name: "bad quota period", vars: map[string]string{"EVS_QUOTA_PERIOD": "week"}, errMatch: "EVS_QUOTA_PERIOD"},
		{name: "bad smtp mode", vars: map[string]string{"EVS_SMTP": "smoke"}, errMatch: "EVS_SMTP"},
		{name: "proxy mode without proxy", vars: map[string]string{"EVS_SMTP": "proxy"}, errMatch: "EVS_SMTP_PROXY"},
		{name: "bad proxy scheme", vars: map[string]string{"EVS_SMTP_PROXY": "http://p:1"}, errMatch: "socks5"},
		{name: "bad port", vars: map[string]string{"EVS_SMTP_PORT": "99999"}, errMatch: "EVS_SMTP_PORT"},
		{name: "bad rate", vars: map[string]string{"EVS_RATE_LIMIT": "-3"}, errMatch: "EVS_RATE_LIMIT"},
		{name: "bad retention", vars: map[string]string{"EVS_RETENTION_DAYS": "zero"}, errMatch: "EVS_RETENTION_DAYS"},
		{name: "bad dns", vars: map[string]string{"EVS_DNS_SERVERS": "not a server:x"}, errMatch: "EVS_DNS_SERVERS"},
		{name: "bad egress allow-list", vars: map[string]string{"EVS_EGRESS_ALLOW": "127.0.0.0/8,10.0.0.1"}, errMatch: `EVS_EGRESS_ALLOW: egress: allow-list entry "10.0.0.1" is not a CIDR; want comma-separated CIDRs like 127.0.0.0/8,fd00::/8`},
		{name: "egress allow-list", vars: map[string]string{"EVS_EGRESS_ALLOW": "127.0.0.0/8, fd00::/8"}, check: func(t *testing.T, c config.Config) {
			if !c.Egress.Allowed(netip.MustParseAddr("127.0.0.1")) || !c.Egress.Allowed(netip.MustParseAddr("fd00::25")) || c.Egress.Allowed(netip.MustParseAddr("10.0.0.1")) {
				t.Fatalf("allow-list %v", c.Egress.Allowlist())
			}
		}},
		{name: "egress default refuses loopback", vars: map[string]string{}, check: func(t *testing.T, c config.Config) {
			if c.Egress.Allowed(netip.MustParseAddr("127.0.0.1")) || len(c.Egress.Allowlist()) != 0 {
				t.Fatalf("allow-list %v", c.Egress.Allowlist())
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.FromEnv(env(c.vars), c.lambda)
			if c.errMatch != "" {
				if err == nil || !strings.Contains(err.Error(), c.errMatch) {
					t.Fatalf("error %v, want one naming %s", err, c.errMatch)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, cfg)
		})
	}
}

// The proxy fetched from the secret is checked as EVS_SMTP_PROXY is, and a
// refused value is never echoed: it may carry the proxy's password.
func TestSetSMTPProxy(t *testing.T) {
	var c config.Config
	if err := c.SetSMTPProxy("socks5://evs:s3cret@10.0.0.1:1080"); err != nil || c.SMTPProxy != "socks5://evs:s3cret@10.0.0.1:1080" {
		t.Fatalf("valid proxy: %v, SMTPProxy %q", err, c.SMTPProxy)
	}
	for _, bad := range []string{"", "http://evs:s3cret@10.0.0.1:3128", "socks5://", "evs:s3cret"} {
		c := config.Config{}
		err := c.SetSMTPProxy(bad)
		if err == nil || c.SMTPProxy != "" {
			t.Errorf("%q accepted (SMTPProxy %q)", bad, c.SMTPProxy)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "EVS_SMTP_PROXY_SECRET") {
			t.Errorf("%q: error %q must name the variable and not echo the value", bad, err)
		}
	}
}
