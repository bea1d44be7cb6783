// Package webhook delivers the signed event of a batch's final state to the
// batch's callbackUrl (docs/webhooks.md): the Standard Webhooks signature
// with each account's whsec_ secrets, the retry schedule, and one attempt
// at a time through the store's claim, so that `evs serve` (a polling loop)
// and the SQS worker (delayed messages) share every rule.
package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/evs-dev/evs/internal/evs"
)

// SecretPrefix starts every signing secret.
const SecretPrefix = "whsec_"

// RotationOverlap is how long the previous secret still signs after a
// rotation, so receivers can switch without losing events.
const RotationOverlap = 24 * time.Hour

// NewSecret returns a fresh secret: "whsec_" and the base64 of 32 random
// bytes.
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b[:])
}

// Signers returns the secrets that sign at now: the current one, and each
// retired one during the day after its rotation.
func Signers(s evs.WebhookSecret, now time.Time) []string {
	out := []string{s.Current}
	for _, r := range s.Retired {
		if r.Secret != "" && now.Before(r.RetiredAt.Add(RotationOverlap)) {
			out = append(out, r.Secret)
		}
	}
	return out
}

// Sign returns the webhook-signature header value: one "v1,<base64>"
// signature per secret, space-separated.
func Sign(secrets []string, id string, ts time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		if !strings.HasPrefix(s, SecretPrefix) {
			return "", fmt.Errorf("webhook: a secret must start with %s", SecretPrefix)
		}
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			return "", fmt.Errorf("webhook: malformed secret: %w", err)
		}
		sig, err := wh.Sign(id, ts, body)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}

// EventID is the webhook-id of a batch's one event: stable across retries
// and restarts, so receivers deduplicate on it.
func EventID(batchID string) string { return "msg_" + batchID }
