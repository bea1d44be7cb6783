package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// TestPublishableKeyOnLambda runs a publishable key through the AWS path
// with the Lambda events' shapes: the REQUEST authorizer's answer, then
// the verify function's handler (lambda.Proxy) given that answer as API
// Gateway hands it on (contract, section 17).
func TestPublishableKeyOnLambda(t *testing.T) {
	ctx := context.Background()
	clock := testkit.NewClock(epoch)
	st, err := sqlitestore.Open(ctx, t.TempDir(), clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.CreateAccount(ctx, evs.Account{ID: "acct-1", Name: "shop", Test: true, CreatedAt: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	const origin = "https://shop.example"
	key, err := authorizer.Issue(ctx, st, evs.Key{AccountID: "acct-1", Kind: evs.KeyPublishable, Origins: []string{origin}}, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	az := lambda.Authorizer(authorizer.New(st))
	const arn = "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/"
	authorize := func(methodPath string) events.APIGatewayCustomAuthorizerResponse {
		t.Helper()
		resp, err := az(ctx, events.APIGatewayCustomAuthorizerRequestTypeRequest{Type: "REQUEST", MethodArn: arn + methodPath,
			Headers: map[string]string{"X-Api-Key": key, "Origin": origin}})
		if err != nil {
			t.Fatalf("authorizer on %s: %v", methodPath, err)
		}
		return resp
	}

	// The policy names POST /v1/verify alone, whichever route asked first:
	// API Gateway caches it per key and applies it to every route.
	for _, mp := range []string{"POST/v1/verify", "GET/v1/requests", "POST/v1/requests/x/cancel"} {
		resp := authorize(mp)
		st := resp.PolicyDocument.Statement
		if len(st) != 1 || st[0].Effect != "Allow" || len(st[0].Resource) != 1 || st[0].Resource[0] != arn+"POST/v1/verify" {
			t.Errorf("policy asked from %s: %+v, want Allow on %sPOST/v1/verify only", mp, st, arn)
		}
		if resp.Context["keyKind"] != "publishable" || resp.Context["origins"] != origin {
			t.Errorf("context asked from %s: %v", mp, resp.Context)
		}
	}

	sandbox := verify.NewSandbox(clock.Now)
	h := api.New(api.Deps{Engine: sandbox, Sandbox: sandbox, Now: clock.Now})
	fn := lambda.Proxy(api.Mux(api.ObserveOptions{}, h.MountVerify(nil), h.MountBatches(nil)))
	authz := authorize("POST/v1/verify").Context
	call := func(method, resource, origin string, withAuth bool) events.APIGatewayProxyResponse {
		t.Helper()
		ev := events.APIGatewayProxyRequest{Resource: resource, Path: resource, HTTPMethod: method,
			Headers:        map[string]string{"Content-Type": "application/json", "X-Api-Key": key},
			Body:           `{"email":"someone@gmial.com"}`,
			RequestContext: events.APIGatewayProxyRequestContext{RequestID: "rid-1", ResourcePath: resource, HTTPMethod: method}}
		if origin != "" {
			ev.Headers["Origin"] = origin
		}
		if withAuth {
			ev.RequestContext.Authorizer = map[string]any{"principalId": authz["keyId"]}
			for k, v := range authz {
				ev.RequestContext.Authorizer[k] = v
			}
		}
		r, err := fn(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	r := call(http.MethodPost, "/v1/verify", origin, true)
	var m map[string]any
	if r.StatusCode != http.StatusOK || json.Unmarshal([]byte(r.Body), &m) != nil {
		t.Fatalf("from its origin: %d %s", r.StatusCode, r.Body)
	}
	if _, ok := m["decision"]; ok || m["suggestion"] != "someone@gmail.com" || len(m) != 6 {
		t.Errorf("reply %s, want the trimmed one", r.Body)
	}
	if r.Headers["Access-Control-Allow-Origin"] != origin {
		t.Errorf("Access-Control-Allow-Origin = %q, want %q", r.Headers["Access-Control-Allow-Origin"], origin)
	}
	for _, tt := range []struct{ name, method, resource, origin string }{
		{"no origin", http.MethodPost, "/v1/verify", ""},
		{"another origin", http.MethodPost, "/v1/verify", "https://evil.example"},
		{"another route, had the policy let it by", http.MethodGet, "/v1/requests", origin},
	} {
		r := call(tt.method, tt.resource, tt.origin, true)
		var e errorBody
		if r.StatusCode != http.StatusForbidden || json.Unmarshal([]byte(r.Body), &e) != nil || e.Error.Code != evs.CodeForbidden {
			t.Errorf("%s: %d %s, want 403 forbidden", tt.name, r.StatusCode, r.Body)
		}
		if r.Headers["Access-Control-Allow-Origin"] != "" {
			t.Errorf("%s: refused reply carries Access-Control-Allow-Origin", tt.name)
		}
	}

	// The preflight's method has no authorizer on AWS: no principal.
	pr := call(http.MethodOptions, "/v1/verify", "https://any.example", false)
	if pr.StatusCode != http.StatusNoContent || pr.Headers["Access-Control-Allow-Origin"] != "https://any.example" ||
		pr.Headers["Access-Control-Allow-Headers"] != "Content-Type, X-Api-Key" || pr.Headers["Access-Control-Allow-Methods"] != "POST" {
		t.Errorf("preflight: %d %v", pr.StatusCode, pr.Headers)
	}

	// Revoked: the authorizer denies it.
	if _, err := st.RevokeKey(ctx, authorizer.HashKey(key), clock.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if resp := authorize("POST/v1/verify"); resp.PolicyDocument.Statement[0].Effect != "Deny" {
		t.Errorf("revoked key: %+v, want Deny", resp.PolicyDocument)
	}
}
