package evs

import "time"

// Account owns keys and batches. A test-mode account gets sandbox verdicts
// (contract, section 8) and never causes network traffic.
type Account struct {
	ID        string
	Name      string
	Test      bool
	Suspended bool
	CreatedAt time.Time
}

// Key is an API key as kept: never the secret, only its SHA-256 hash.
type Key struct {
	// ID is a short public identifier (the first 12 hex characters of the
	// hash) shown by `evs keys list` and accepted by `evs keys revoke`.
	ID string
	// Hash is the lower-case hex SHA-256 of the whole key string.
	Hash      string
	AccountID string
	Revoked   bool
	CreatedAt time.Time
	RevokedAt time.Time
	// UsageKeyID is the API Gateway usage-plan key of the account (AWS only).
	UsageKeyID string
	// Kind is KeySecret (also the zero value, as every key made before
	// publishable keys) or KeyPublishable (contract, section 17).
	Kind KeyKind
	// Origins are the web origins a publishable key is accepted from,
	// each scheme://host[:port]; none for a secret key.
	Origins []string
	// Limits are a publishable key's own rate limits; zero fields take
	// the defaults.
	Limits KeyLimits
}

// KeyLimits are a publishable key's calls a minute: from one client
// address (PerAddress) and from all of them (PerKey). 0 is the default.
type KeyLimits struct {
	PerAddress, PerKey int
}

// KeyKind tells a secret key from one safe to put in a web page.
type KeyKind string

// The kinds of key.
const (
	KeySecret      KeyKind = ""
	KeyPublishable KeyKind = "publishable"
)
