package api

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// SNSOutcomes receives SNS messages that carry Amazon SES notifications
// for one account: the signature is verified, the topic checked against an
// allow-list, a subscription confirmed, and a notification's outcomes
// stored as POST /v1/outcomes stores them.
type SNSOutcomes struct {
	Verifier *SNSVerifier
	// Topics, when not empty, are the only TopicArns accepted.
	Topics []string
	// Confirm visits a SubscribeURL (the verifier's host rule already
	// passed); nil confirms no subscription.
	Confirm func(ctx context.Context, url string) error
	Store   Outcomes
	// Ledger, when set, charges what is kept to the account's outcomes
	// cap and storage quota, as POST /v1/outcomes does.
	Ledger Ledger
	// TTL is how long an outcome is kept (0: DefaultOutcomeTTL).
	TTL time.Duration
	Now func() time.Time
}

// SNSReceipt says what a message did.
type SNSReceipt struct {
	// Type is the SNS message type.
	Type string `json:"type"`
	// Received counts the outcomes the notification held; Accepted the
	// new ones, Duplicates those already stored; Skipped the recipients
	// left out (an invalid address or time).
	Received   int `json:"received"`
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
	Skipped    int `json:"skipped"`
	// Confirmed is true when a SubscriptionConfirmation was confirmed.
	Confirmed bool `json:"confirmed"`
}

// MaxSNSBody is the largest SNS message accepted: SNS's messages are at
// most 256 KiB, and the envelope escapes the JSON Message inside it.
const MaxSNSBody = 1 << 20

// Receive handles one SNS message for the account. A message whose
// signature does not verify, or from a topic not allowed, is refused
// (403 forbidden) and nothing is stored; a malformed one is 400.
func (s *SNSOutcomes) Receive(ctx context.Context, accountID string, body []byte) (SNSReceipt, error) {
	m, err := ParseSNSMessage(body)
	if err != nil {
		return SNSReceipt{}, evs.Wrap(err, evs.CodeInvalidRequest, "The body is not an Amazon SNS message.")
	}
	if err := s.Verifier.Verify(ctx, m); err != nil {
		return SNSReceipt{}, evs.Wrap(err, evs.CodeForbidden, "The message's Amazon SNS signature does not verify.")
	}
	if len(s.Topics) > 0 && !slices.Contains(s.Topics, m.TopicArn) {
		return SNSReceipt{}, evs.Errorf(evs.CodeForbidden, "The message's topic is not one this endpoint accepts.")
	}
	r := SNSReceipt{Type: m.Type}
	switch m.Type {
	case SNSSubscriptionConfirmation:
		if s.Confirm == nil {
			return r, nil
		}
		if !s.Verifier.HostOK(m.SubscribeURL) {
			return SNSReceipt{}, evs.Errorf(evs.CodeForbidden, "The SubscribeURL is not https on an Amazon SNS host.")
		}
		if err := s.Confirm(ctx, m.SubscribeURL); err != nil {
			return SNSReceipt{}, evs.Wrap(err, evs.CodeUnavailable, "The subscription could not be confirmed; SNS will send the confirmation again.")
		}
		r.Confirmed = true
		return r, nil
	case SNSUnsubscribeConfirmation:
		return r, nil
	}
	now := s.now()
	os, skipped, err := SESOutcomes([]byte(m.Message), now)
	if err != nil {
		return SNSReceipt{}, evs.Wrap(err, evs.CodeInvalidRequest, "The notification's Message is not an Amazon SES notification.")
	}
	r.Received, r.Skipped = len(os), skipped
	if len(os) == 0 {
		return r, nil
	}
	// The account's live limits: a notification names no key, so no mode.
	res, err := keepOutcomes(ctx, s.Ledger, s.Store, evs.Principal{AccountID: accountID}, os, now, cmp.Or(max(s.TTL, 0), DefaultOutcomeTTL))
	if err != nil {
		return SNSReceipt{}, err
	}
	r.Accepted, r.Duplicates = res.Accepted, res.Duplicates
	return r, nil
}

func (s *SNSOutcomes) now() time.Time { return evs.Now(s.Now) }

// HTTPConfirm returns a Confirm that GETs the SubscribeURL with client
// and wants a 200.
func HTTPConfirm(client *http.Client) func(ctx context.Context, url string) error {
	return func(ctx context.Context, url string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("sns: confirm request: %w", err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("sns: confirm subscription: %w", err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("sns: confirm subscription: status %d", resp.StatusCode)
		}
		return nil
	}
}

// snsTokenPrefix starts every SNS endpoint token.
const snsTokenPrefix = "snst_"

// SNSToken is the token of the account's SNS endpoint URL: an HMAC-SHA256
// of the account's id under one of its webhook secrets, so it needs no
// storage and changes when the secret is rotated.
func SNSToken(secret, accountID string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("evs sns outcomes v1\x00"))
	m.Write([]byte(accountID))
	return snsTokenPrefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// SNSTokenValid tells, in constant time for each secret, whether token is
// the SNS endpoint token of the account under any of secrets.
func SNSTokenValid(token, accountID string, secrets []string) bool {
	ok := false
	for _, s := range secrets { // every one: no early return
		if s != "" && hmac.Equal([]byte(SNSToken(s, accountID)), []byte(token)) {
			ok = true
		}
	}
	return ok
}
