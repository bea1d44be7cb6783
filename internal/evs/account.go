package evs

import "time"

// Account owns keys and batches. A test-mode account gets sandbox verdicts
// and never causes network traffic.
type Account struct {
	ID        string
	Name      string
	Test      bool
	Suspended bool
	CreatedAt time.Time
}

// Key is an API key as kept: never the secret, only its SHA-256 hash.
type Key struct {
	ID         string // the hash's first 12 hex characters, shown and accepted by `evs keys`
	Hash       string // lower-case hex SHA-256 of the whole key string
	AccountID  string
	Revoked    bool
	CreatedAt  time.Time
	RevokedAt  time.Time
	UsageKeyID string  // the account's API Gateway usage-plan key (AWS only)
	Kind       KeyKind // KeySecret (the zero value, as keys made before publishable ones) or KeyPublishable
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
