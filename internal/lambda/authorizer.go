package lambda

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
)

// The names of the authorizer context's values, which API Gateway hands to
// the integration (Proxy reads them back).
const (
	contextAccountID = "accountId"
	contextKeyID     = "keyId"
	contextTestMode  = "testMode"
	// contextKeyKind and contextOrigins carry a publishable key's kind
	// and origins (space-separated) to the handlers, which apply the
	// Origin rule on every call (api.Permit): the authorizer's answer is
	// cached per key, not per Origin.
	contextKeyKind = "keyKind"
	contextOrigins = "origins"
	// contextLimits carries a publishable key's own rate limits, "<per
	// address> <per key>" calls a minute (0: the default).
	contextLimits = "limits"
)

// Authorizer is the Lambda REQUEST authorizer handler of a. An unauthorized caller
// gets the error "Unauthorized", which API Gateway answers with 401; a
// forbidden one a Deny policy (403) and an allowed one an Allow policy, both
// on every method and path of the stage, because API Gateway caches the
// policy per key for other routes too. Store failures and a malformed
// method ARN are returned as errors, which API Gateway answers with 500.
func Authorizer(a *authorizer.Authorizer) func(ctx context.Context, req events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
	return func(ctx context.Context, req events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
		key, ok := headerKey(req)
		if !ok {
			return events.APIGatewayCustomAuthorizerResponse{}, errors.New("Unauthorized")
		}
		p, err := a.Authorize(ctx, key)
		switch {
		case errors.Is(err, authorizer.ErrUnauthorized):
			// API Gateway maps exactly this message to 401.
			return events.APIGatewayCustomAuthorizerResponse{}, errors.New("Unauthorized")
		case err != nil && !errors.Is(err, authorizer.ErrForbidden):
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
		if err == nil && p.Kind == evs.KeyPublishable {
			// A publishable key is allowed its one method and path, never
			// the stage: API Gateway evaluates the cached policy on every
			// call, so each other route is 403 whichever call was first.
			resource = strings.TrimSuffix(resource, "/*/*") + "/" + authorizer.PublishableMethod + authorizer.PublishableRoute
		}
		if err != nil { // authorizer.ErrForbidden
			return events.APIGatewayCustomAuthorizerResponse{PrincipalID: cmp.Or(p.KeyID, "anonymous"), PolicyDocument: policy("Deny", resource)}, nil
		}
		ctxValues := map[string]any{
			contextAccountID: p.AccountID,
			contextKeyID:     p.KeyID,
			contextTestMode:  strconv.FormatBool(p.Test),
		}
		if p.Kind == evs.KeyPublishable {
			ctxValues[contextKeyKind] = string(p.Kind)
			ctxValues[contextOrigins] = strings.Join(p.Origins, " ")
			ctxValues[contextLimits] = fmt.Sprintf("%d %d", p.Limits.PerAddress, p.Limits.PerKey)
		}
		return events.APIGatewayCustomAuthorizerResponse{
			PrincipalID:        p.KeyID,
			PolicyDocument:     policy("Allow", resource),
			Context:            ctxValues,
			UsageIdentifierKey: p.UsageKeyID,
		}, nil
	}
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

// headerKey returns the API key header's value, its name matched without
// regard to case, from Headers and MultiValueHeaders; ok is false when there
// is none or they disagree, as two different keys have no single identity.
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
		if strings.EqualFold(name, authorizer.HeaderName) && !take(v) {
			return "", false
		}
	}
	for name, vs := range req.MultiValueHeaders {
		if !strings.EqualFold(name, authorizer.HeaderName) {
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

// StageResource returns the ARN covering every method and path of
// methodArn's stage: arn:aws:execute-api:REGION:ACCOUNT:APIID/STAGE/*/*. A
// methodArn not of that form is an error, since guessing could allow more
// than the deployment it came from.
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
