package evs

import "context"

// Principal is the caller of an API call: the account and key its API key
// resolved to. On `evs serve` the key lookup puts it in the call's context;
// on AWS the REQUEST authorizer's answer does, through the Lambda adapter.
type Principal struct {
	AccountID string
	KeyID     string
	Test      bool // the account's test mode: answers come from the sandbox
	// The key's kind, origins and limits: a publishable key may call only
	// what authorizer.Permit allows.
	Kind    KeyKind
	Origins []string
	Limits  KeyLimits
}

type principalKey struct{}

// NewContextWithPrincipal returns ctx carrying p.
func NewContextWithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFromContext returns the principal of ctx; ok is false when the
// call was never authenticated (a route wired without its key check).
func PrincipalFromContext(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(principalKey{}).(Principal)
	return p, ok && p.AccountID != ""
}

type requestIDKey struct{}

// NewContextWithRequestID returns ctx carrying the call's request id, as a
// deployment assigned it (API Gateway's requestContext.requestId on AWS).
func NewContextWithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestIDFromContext returns the request id ctx carries, "" for none.
func RequestIDFromContext(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
