package authorizer

// API keys have the form "evs." + 43 characters of unpadded base64url (32
// random bytes). Only their SHA-256 hash is ever stored.

import (
	"context"
	"time"

	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/evs-dev/evs/internal/evs"
)

// KeyPrefix is the fixed service prefix, dot included.
const KeyPrefix = "evs."

// secretLen is the length of 32 bytes in unpadded base64url.
const secretLen = 43

// KeyLen is the length of a whole key.
const KeyLen = len(KeyPrefix) + secretLen

// NewKey returns a fresh key from crypto/rand.
func NewKey() (string, error) { return NewKeyFrom(rand.Reader) }

// NewKeyFrom returns a key whose secret is read from r.
func NewKeyFrom(r io.Reader) (string, error) {
	var b [32]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// WellFormed tells whether s has the key format. It does not say whether the
// key exists.
func WellFormed(s string) bool {
	if len(s) != KeyLen || s[:len(KeyPrefix)] != KeyPrefix {
		return false
	}
	for i := len(KeyPrefix); i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	// The last character carries 2 padding bits that must be zero in a
	// canonical encoding of 32 bytes.
	_, err := base64.RawURLEncoding.Strict().DecodeString(s[len(KeyPrefix):])
	return err == nil
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
// API Gateway usage-plan key, if any) and returns the key, which is shown
// once and never stored. It is the one way keys are made: `evs serve` on
// first start and `evs keys create` both call it.
func IssueKey(ctx context.Context, st KeyWriter, accountID, usageKeyID string, now time.Time) (string, error) {
	key, err := NewKey()
	if err != nil {
		return "", evs.Wrap(err, evs.CodeInternal, "could not make a key")
	}
	h := HashKey(key)
	k := evs.Key{ID: KeyID(h), Hash: h, AccountID: accountID, CreatedAt: now.UTC(), UsageKeyID: usageKeyID}
	if err := st.CreateKey(ctx, k); err != nil {
		return "", fmt.Errorf("store key %s: %w", k.ID, err)
	}
	return key, nil
}
