// Package authorizer is the API's REQUEST authorizer: it resolves the
// X-Api-Key header to an account and answers API Gateway with an IAM policy
// (API contract, section 1: missing, malformed or unknown key → 401; revoked
// key or suspended account → 403).
//
// The key itself never appears in an error, a policy or a log; only its
// short public ID does.
package authorizer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"

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
	p := Principal{AccountID: k.AccountID, KeyID: k.ID, UsageKeyID: k.UsageKeyID}
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

// Handle is the Lambda REQUEST authorizer handler. An unauthorized caller
// gets the error "Unauthorized", which API Gateway answers with 401; a
// forbidden one a Deny policy (403) and an allowed one an Allow policy, both
// on every method and path of the stage, because API Gateway caches the
// policy per key for other routes too. Store failures and a malformed
// method ARN are returned as errors, which API Gateway answers with 500.
func (a *Authorizer) Handle(ctx context.Context, req events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
	key, ok := headerKey(req)
	if !ok {
		return events.APIGatewayCustomAuthorizerResponse{}, errors.New("Unauthorized")
	}
	p, err := a.Authorize(ctx, key)
	switch {
	case errors.Is(err, ErrUnauthorized):
		// API Gateway maps exactly this message to 401.
		return events.APIGatewayCustomAuthorizerResponse{}, errors.New("Unauthorized")
	case err != nil && !errors.Is(err, ErrForbidden):
		return events.APIGatewayCustomAuthorizerResponse{}, err
	}
	// Both answers name the whole stage, never the method ARN: that ARN
	// holds the client's path, and a policy resource is a pattern, so a
	// path full of '*' would be matched as wildcards (it made a
	// backtracking matcher spin). A revoked key is denied everywhere anyway.
	resource, rerr := StageResource(req.MethodArn)
	if rerr != nil {
		return events.APIGatewayCustomAuthorizerResponse{}, rerr
	}
	if err != nil { // ErrForbidden
		principal := p.KeyID
		if principal == "" {
			principal = "anonymous"
		}
		return events.APIGatewayCustomAuthorizerResponse{
			PrincipalID:    principal,
			PolicyDocument: policy("Deny", resource),
		}, nil
	}
	test := "false"
	if p.Test {
		test = "true"
	}
	return events.APIGatewayCustomAuthorizerResponse{
		PrincipalID:    p.KeyID,
		PolicyDocument: policy("Allow", resource),
		Context: map[string]any{
			"accountId": p.AccountID,
			"keyId":     p.KeyID,
			"testMode":  test,
		},
		UsageIdentifierKey: p.UsageKeyID,
	}, nil
}

func policy(effect, resource string) events.APIGatewayCustomAuthorizerPolicy {
	return events.APIGatewayCustomAuthorizerPolicy{
		Version: "2012-10-17",
		Statement: []events.IAMPolicyStatement{{
			Action:   []string{"execute-api:Invoke"},
			Effect:   effect,
			Resource: []string{resource},
		}},
	}
}

// headerKey returns the API key header's value, the name matched without
// regard to case as HTTP requires. Values from Headers and MultiValueHeaders
// are pooled; ok is false when there is none or when they disagree, since a
// request carrying two different keys has no single identity.
func headerKey(req events.APIGatewayCustomAuthorizerRequestTypeRequest) (string, bool) {
	var key string
	found := false
	take := func(v string) bool {
		if found && v != key {
			return false
		}
		key, found = v, true
		return true
	}
	for name, v := range req.Headers {
		if strings.EqualFold(name, HeaderName) && !take(v) {
			return "", false
		}
	}
	for name, vs := range req.MultiValueHeaders {
		if !strings.EqualFold(name, HeaderName) {
			continue
		}
		for _, v := range vs {
			if !take(v) {
				return "", false
			}
		}
	}
	return key, found
}

// StageResource returns the ARN covering every method and path of the
// stage methodArn belongs to: for
// arn:aws:execute-api:REGION:ACCOUNT:APIID/STAGE/METHOD/PATH it is
// arn:aws:execute-api:REGION:ACCOUNT:APIID/STAGE/*/*. A methodArn not of
// that form is an error: granting anything broader, or guessing, could
// allow more than the API Gateway deployment it came from.
func StageResource(methodArn string) (string, error) {
	parts := strings.SplitN(methodArn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[1] == "" || parts[2] != "execute-api" || parts[3] == "" || parts[4] == "" {
		return "", fmt.Errorf("authorizer: malformed method ARN %q", methodArn)
	}
	segs := strings.SplitN(parts[5], "/", 4)
	if len(segs) < 3 || segs[0] == "" || segs[1] == "" || segs[2] == "" {
		return "", fmt.Errorf("authorizer: method ARN %q lacks API id, stage and method", methodArn)
	}
	prefix := strings.Join(parts[:5], ":") + ":" + segs[0] + "/" + segs[1]
	if strings.ContainsAny(prefix, "*?") {
		return "", fmt.Errorf("authorizer: method ARN %q has wildcards", methodArn)
	}
	return prefix + "/*/*", nil
}
