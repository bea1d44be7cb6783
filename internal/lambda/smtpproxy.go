package lambda

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/evs-dev/evs/internal/config"
)

// secretTimeout bounds the fetch, so a cold start that cannot reach Secrets
// Manager fails with a reason rather than hanging.
const secretTimeout = 10 * time.Second

// ResolveSMTPProxy sets cfg.SMTPProxy and cfg.SMTPExits from the secret
// cfg.SMTPProxySecret names: one or more comma-separated exit URLs, each
// with its optional #egress-ip (config.SMTPExit). A URL may carry a password,
// so on AWS it is a secret, granted to the function alone, read once at
// cold start. It makes no call when no secret is configured or SMTP is off.
// Errors name the secret's ARN, never its value.
func ResolveSMTPProxy(ctx context.Context, awsCfg aws.Config, cfg *config.Config) error {
	if cfg.SMTPProxySecret == "" || cfg.SMTP == config.SMTPOff {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, secretTimeout)
	defer cancel()
	sm := secretsmanager.NewFromConfig(awsCfg)
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(cfg.SMTPProxySecret)})
	if err != nil {
		return fmt.Errorf("proxysecret: read %s: %w", cfg.SMTPProxySecret, err)
	}
	if out.SecretString == nil {
		return fmt.Errorf("proxysecret: %s holds binary data, not the socks5:// URL as a string", cfg.SMTPProxySecret)
	}
	// A value pasted into the console often ends in a newline.
	if err := cfg.SetSMTPProxy(strings.TrimSpace(*out.SecretString)); err != nil {
		return fmt.Errorf("proxysecret: %s: %w", cfg.SMTPProxySecret, err)
	}
	return nil
}
