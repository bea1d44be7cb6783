// Package authorizer resolves an API key to its account (missing, malformed
// or unknown key: 401; revoked key or suspended account: 403). `evs serve`
// runs it as middleware; on AWS the REQUEST authorizer Lambda runs the same
// lookup and answers API Gateway with a policy.
//
// The key itself never appears in an error, a policy or a log; only its
// short public ID does.
package authorizer

import (
	"context"
	"errors"
	"fmt"

	"github.com/evs-dev/evs/internal/evs"
)

// Sentinel outcomes of Authorize.
var (
	// ErrUnauthorized: the key is missing, malformed or unknown (401).
	ErrUnauthorized = errors.New("authorizer: missing, malformed or unknown API key")
	// ErrForbidden: the key is revoked or its account suspended (403).
	ErrForbidden = errors.New("authorizer: API key revoked or account suspended")
)

// HeaderName is the header that carries the API key.
const HeaderName = "X-Api-Key"

// Keys is what the authorizer needs from the store.
type Keys interface {
	KeyByHash(ctx context.Context, hash string) (evs.Key, error)
	Account(ctx context.Context, id string) (evs.Account, error)
}

// Principal is the caller a key resolves to.
type Principal struct {
	AccountID string
	KeyID     string
	Test      bool
	// UsageKeyID is the API Gateway usage-plan key of the account, if any.
	UsageKeyID string
	// Kind, Origins and Limits are the key's (evs.Key).
	Kind    evs.KeyKind
	Origins []string
	Limits  evs.KeyLimits
}

// Evs is the principal as the handlers see it.
func (p Principal) Evs() evs.Principal {
	return evs.Principal{AccountID: p.AccountID, KeyID: p.KeyID, Test: p.Test, Kind: p.Kind, Origins: p.Origins, Limits: p.Limits}
}

// Authorizer checks API keys against the store.
type Authorizer struct {
	keys Keys
}

// New returns an Authorizer reading keys and accounts from k.
func New(k Keys) *Authorizer { return &Authorizer{keys: k} }

// Authorize resolves key to its principal. A missing, malformed or unknown
// key gives ErrUnauthorized; a revoked key or a suspended account gives
// ErrForbidden together with the principal, so the denial can name the key.
// A store failure is returned wrapped, matching neither sentinel.
func (a *Authorizer) Authorize(ctx context.Context, key string) (Principal, error) {
	if !WellFormed(key) {
		// Also covers the empty key; a malformed key is never looked up.
		return Principal{}, ErrUnauthorized
	}
	k, err := a.keys.KeyByHash(ctx, HashKey(key))
	if evs.ErrorCode(err) == evs.CodeNotFound {
		return Principal{}, ErrUnauthorized
	}
	if err != nil {
		return Principal{}, fmt.Errorf("authorizer: look up key: %w", err)
	}
	p := Principal{AccountID: k.AccountID, KeyID: k.ID, UsageKeyID: k.UsageKeyID, Kind: k.Kind, Origins: k.Origins, Limits: k.Limits}
	if k.Revoked {
		return p, ErrForbidden
	}
	acct, err := a.keys.Account(ctx, k.AccountID)
	if evs.ErrorCode(err) == evs.CodeNotFound {
		// A key whose account is gone resolves to no one: as unknown.
		return Principal{}, ErrUnauthorized
	}
	if err != nil {
		return Principal{}, fmt.Errorf("authorizer: look up account of key %s: %w", k.ID, err)
	}
	p.Test = acct.Test
	if acct.Suspended {
		return p, ErrForbidden
	}
	return p, nil
}
