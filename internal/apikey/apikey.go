// Package apikey makes, checks and hashes API keys of the form
// "evs." + 43 characters of unpadded base64url (32 random bytes).
package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
)

// Prefix is the fixed service prefix, dot included.
const Prefix = "evs."

// secretLen is the length of 32 bytes in unpadded base64url.
const secretLen = 43

// Len is the length of a whole key.
const Len = len(Prefix) + secretLen

// New returns a fresh key from crypto/rand.
func New() (string, error) { return NewFrom(rand.Reader) }

// NewFrom returns a key whose secret is read from r.
func NewFrom(r io.Reader) (string, error) {
	var b [32]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return Prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// WellFormed tells whether s has the key format. It does not say whether the
// key exists.
func WellFormed(s string) bool {
	if len(s) != Len || s[:len(Prefix)] != Prefix {
		return false
	}
	for i := len(Prefix); i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	// The last character carries 2 padding bits that must be zero in a
	// canonical encoding of 32 bytes.
	_, err := base64.RawURLEncoding.Strict().DecodeString(s[len(Prefix):])
	return err == nil
}

// Hash returns the lower-case hex SHA-256 of the key, the only form stored.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// ID returns the short public identifier of a key hash.
func ID(hash string) string {
	if len(hash) < 12 {
		return hash
	}
	return hash[:12]
}
