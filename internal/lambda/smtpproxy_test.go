package lambda_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/testkit"
)

// secret stores value as a new secret on moto and returns its ARN.
func secret(t *testing.T, value string) string {
	t.Helper()
	out, err := testkit.SecretsManager(t).CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{
		Name: aws.String(testkit.UniqueName(t, "proxy")), SecretString: aws.String(value),
	})
	if err != nil {
		t.Fatalf("create secret: %v", err)
	}
	return aws.ToString(out.ARN)
}

// lambdaConfig is the configuration a function reads on Lambda with
// EVS_SMTP_PROXY_SECRET set to arn, and the other variables in vars
// ("NAME", "value", ...).
func lambdaConfig(t *testing.T, arn string, vars ...string) config.Config {
	t.Helper()
	env := map[string]string{"EVS_SMTP_PROXY_SECRET": arn}
	for i := 0; i+1 < len(vars); i += 2 {
		env[vars[i]] = vars[i+1]
	}
	cfg, err := config.FromEnv(func(k string) string { return env[k] }, true)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The secret's value becomes the proxy, as if EVS_SMTP_PROXY held it,
// credentials included and the console's trailing newline dropped.
func TestResolveSMTPProxyReadsTheSecret(t *testing.T) {
	const proxy = "socks5://evs:pa55word@198.51.100.7:1080"
	cfg := lambdaConfig(t, secret(t, proxy+"\n"))
	if err := lambda.ResolveSMTPProxy(context.Background(), testkit.AWSConfig(t), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.SMTPProxy != proxy || cfg.SMTP != config.SMTPProxy {
		t.Fatalf("SMTPProxy %q, SMTP %q; want %q, proxy", cfg.SMTPProxy, cfg.SMTP, proxy)
	}
}

// The secret may hold several exits, each with its #egress-ip: the
// functions read them as EVS_SMTP_PROXY would be read, and a wrong entry
// is refused naming the exit, never quoting the value.
func TestResolveSMTPProxyReadsSeveralExits(t *testing.T) {
	const proxy = "socks5://evs:pa55word@198.51.100.7:1080#198.51.100.70,socks5://evs:pa55word@198.51.100.8:1080#198.51.100.80"
	cfg := lambdaConfig(t, secret(t, proxy))
	if err := lambda.ResolveSMTPProxy(context.Background(), testkit.AWSConfig(t), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.SMTPExits) != 2 || cfg.SMTPExits[1].Name != "198.51.100.8" || cfg.SMTPExits[1].EgressIP.String() != "198.51.100.80" ||
		cfg.SMTPExits[0].URL != "socks5://evs:pa55word@198.51.100.7:1080" || cfg.EgressName() != "198.51.100.7+198.51.100.8" {
		t.Fatalf("exits %+v, egress %q", cfg.SMTPExits, cfg.EgressName())
	}

	arn := secret(t, "socks5://evs:pa55word@198.51.100.7:1080,socks5://evs:pa55word@198.51.100.8")
	cfg = lambdaConfig(t, arn)
	err := lambda.ResolveSMTPProxy(context.Background(), testkit.AWSConfig(t), &cfg)
	if err == nil || strings.Contains(err.Error(), "pa55word") || !strings.Contains(err.Error(), "exit 2 of 2") || cfg.SMTPExits != nil {
		t.Errorf("bad second exit: error %v (want one naming exit 2, not the value), exits %v", err, cfg.SMTPExits)
	}
}

// Without a secret, or with SMTP probing off, nothing is fetched: the AWS
// configuration here points at a port nothing listens on, so any call
// would fail.
func TestResolveSMTPProxyWithoutSecretCallsNothing(t *testing.T) {
	awsCfg := testkit.AWSConfig(t)
	awsCfg.BaseEndpoint = aws.String("http://127.0.0.1:9")
	for name, cfg := range map[string]config.Config{
		"no secret": lambdaConfig(t, ""),
		"smtp off":  lambdaConfig(t, "arn:aws:secretsmanager:us-east-1:123456789012:secret:evs-proxy-AbCdEf", "EVS_SMTP", "off"),
	} {
		if err := lambda.ResolveSMTPProxy(context.Background(), awsCfg, &cfg); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if cfg.SMTPProxy != "" || cfg.SMTP != config.SMTPOff {
			t.Errorf("%s: SMTPProxy %q, SMTP %q; want none, off", name, cfg.SMTPProxy, cfg.SMTP)
		}
	}
}

// A missing secret fails with Secrets Manager's error wrapped and the ARN
// named; a value that is not a SOCKS5 URL fails without quoting it.
func TestResolveSMTPProxyFailures(t *testing.T) {
	ctx := context.Background()
	missing := "arn:aws:secretsmanager:us-east-1:123456789012:secret:evs-missing-AbCdEf"
	cfg := lambdaConfig(t, missing)
	err := lambda.ResolveSMTPProxy(ctx, testkit.AWSConfig(t), &cfg)
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), missing) || cfg.SMTPProxy != "" {
		t.Errorf("missing secret: error %v (want ResourceNotFoundException naming the ARN), SMTPProxy %q", err, cfg.SMTPProxy)
	}

	arn := secret(t, "http://evs:pa55word@198.51.100.7:3128")
	cfg = lambdaConfig(t, arn)
	err = lambda.ResolveSMTPProxy(ctx, testkit.AWSConfig(t), &cfg)
	if err == nil || strings.Contains(err.Error(), "pa55word") || !strings.Contains(err.Error(), arn) || cfg.SMTPProxy != "" {
		t.Errorf("bad value: error %v (want one naming the ARN, not the value), SMTPProxy %q", err, cfg.SMTPProxy)
	}
}
