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

// secretTimeout bounds the fetch: a cold start that cannot reach Secrets
// Manager should fail its init with a reason, not hang until the init
// deadline.
const secretTimeout = 10 * time.Second

// ResolveSMTPProxy gives the Lambda functions that dial SMTP their SOCKS5
// exits from AWS Secrets Manager: one URL, or several comma-separated,
// each with its optional #egress-ip (config.SMTPExit). An exit's URL may
// carry a user name and password (socks5://user:pass@host:port), so on
// AWS it is neither a stack parameter nor an environment variable: the
// template passes the secret's ARN in EVS_SMTP_PROXY_SECRET and grants
// secretsmanager:GetSecretValue on that ARN alone, and the function reads
// the value once, at cold start.
//
// It sets cfg.SMTPProxy and cfg.SMTPExits from the value of the secret
// cfg.SMTPProxySecret names, read with awsCfg. It does nothing, and makes no call, when no
// secret is configured or SMTP probing is off (EVS_SMTP=off wins over a
// proxy). Errors name the secret's ARN, never its value.
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
