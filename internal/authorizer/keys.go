package authorizer

// API keys have the form "evs." + 43 characters of unpadded base64url (32
// random bytes); publishable keys "evs_pk." + the same. Only their SHA-256
// hash is ever stored.

import (
	"context"
	"time"

	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/evs-dev/evs/internal/evs"
)

// KeyPrefix is the fixed service prefix, dot included.
const KeyPrefix = "evs."

// PublishablePrefix is the prefix of a publishable key, so a key pasted into
// a web page is told apart from a secret one by people and secret scanners.
const PublishablePrefix = "evs_pk."

// secretLen is the length of 32 bytes in unpadded base64url.
const secretLen = 43

// NewKey returns a fresh key from crypto/rand.
func NewKey() (string, error) { return NewKeyFrom(rand.Reader) }

// NewKeyFrom returns a key whose secret is read from r.
func NewKeyFrom(r io.Reader) (string, error) { return newKey(r, KeyPrefix) }

// NewPublishableKey returns a fresh publishable key from crypto/rand.
func NewPublishableKey() (string, error) { return newKey(rand.Reader, PublishablePrefix) }

func newKey(r io.Reader, prefix string) (string, error) {
	var b [32]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// WellFormed tells whether s has the format of a key, secret or
// publishable. It does not say whether the key exists.
func WellFormed(s string) bool {
	prefix := KeyPrefix
	if strings.HasPrefix(s, PublishablePrefix) {
		prefix = PublishablePrefix
	}
	if len(s) != len(prefix)+secretLen || s[:len(prefix)] != prefix {
		return false
	}
	// Strict: the last character's 2 padding bits must be zero, as in the
	// canonical encoding of 32 bytes. The decoder skips CR and LF, so only
	// 32 bytes out say that all 43 characters are base64url.
	b, err := base64.RawURLEncoding.Strict().DecodeString(s[len(prefix):])
	return err == nil && len(b) == 32
}

// HashKey returns the lower-case hex SHA-256 of the key, the only form stored.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// KeyID returns the short public identifier of a key hash.
func KeyID(hash string) string {
	if len(hash) < 12 {
		return hash
	}
	return hash[:12]
}

// KeyWriter stores keys.
type KeyWriter interface {
	CreateKey(ctx context.Context, k evs.Key) error
}

// IssueKey makes a key for the account, stores its hash (with the account's
// API Gateway usage-plan key, if any) and returns the key, shown once. It is
// the one way keys are made.
func IssueKey(ctx context.Context, st KeyWriter, accountID, usageKeyID string, now time.Time) (string, error) {
	return Issue(ctx, st, evs.Key{AccountID: accountID, UsageKeyID: usageKeyID}, now)
}

// Issue is IssueKey for a key of any kind: spec gives the account, the
// usage key, and for a publishable key its origins (CheckOrigins) and rate
// limits, if any; the rest is made here.
func Issue(ctx context.Context, st KeyWriter, spec evs.Key, now time.Time) (string, error) {
	newKey := NewKey
	if spec.Kind == evs.KeyPublishable {
		origins, err := CheckOrigins(spec.Origins)
		if err != nil {
			return "", err
		}
		if spec.Limits.PerAddress < 0 || spec.Limits.PerKey < 0 {
			return "", evs.Errorf(evs.CodeInvalidRequest, "a publishable key's rate limits are calls a minute, 0 or more (0: the default)")
		}
		spec.Origins, newKey = origins, NewPublishableKey
	} else if len(spec.Origins) > 0 || spec.Limits != (evs.KeyLimits{}) {
		return "", evs.Errorf(evs.CodeInvalidRequest, "only a publishable key has origins and rate limits of its own")
	}
	key, err := newKey()
	if err != nil {
		return "", evs.Wrap(err, evs.CodeInternal, "could not make a key")
	}
	h := HashKey(key)
	k := evs.Key{ID: KeyID(h), Hash: h, AccountID: spec.AccountID, CreatedAt: now.UTC(), UsageKeyID: spec.UsageKeyID,
		Kind: spec.Kind, Origins: spec.Origins, Limits: spec.Limits}
	if err := st.CreateKey(ctx, k); err != nil {
		return "", fmt.Errorf("store key %s: %w", k.ID, err)
	}
	return key, nil
}
