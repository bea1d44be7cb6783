package main_test

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
)

// TestPublishableKeyBinaries runs a publishable key (contract, section 17)
// through the real authorizer and verify binaries on DynamoDB in moto: the
// authorizer's answer, handed on as API Gateway does, lets the verify
// function serve the page's origin a trimmed reply, refuse another origin,
// answer the keyless preflight, and count the client address's calls in
// the store.
func TestPublishableKeyBinaries(t *testing.T) {
	w := newAWSWorld(t)
	_, acct := w.seedKey(t, true)
	const origin = "https://shop.example"
	key, err := authorizer.Issue(context.Background(), w.st, evs.Key{AccountID: acct.ID, Kind: evs.KeyPublishable, Origins: []string{origin}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	az := w.start(t, build(t, "authorizer"))
	out, err := az.Invoke(events.APIGatewayCustomAuthorizerRequestTypeRequest{
		Type: "REQUEST", MethodArn: "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/GET/v1/requests",
		Headers: map[string]string{"x-api-key": key, "origin": origin},
	}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var grant events.APIGatewayCustomAuthorizerResponse
	if err := json.Unmarshal(out.Response, &grant); err != nil || out.Error != nil {
		t.Fatalf("authorizer reply %s / error %s", out.Response, out.Error)
	}
	st := grant.PolicyDocument.Statement
	if len(st) != 1 || st[0].Effect != "Allow" || len(st[0].Resource) != 1 ||
		st[0].Resource[0] != "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/POST/v1/verify" {
		t.Fatalf("policy asked from GET /v1/requests: %+v, want Allow on POST /v1/verify alone", grant.PolicyDocument)
	}

	verify := w.start(t, build(t, "verify"))
	call := func(method, origin, ip string, withAuth bool) events.APIGatewayProxyResponse {
		t.Helper()
		ev := proxyEvent(method, "/v1/verify", "/v1/verify", nil, acct, `{"email":"someone@gmial.com"}`)
		ev.RequestContext.Authorizer = nil
		if withAuth {
			ev.RequestContext.Authorizer = map[string]any{"principalId": grant.PrincipalID}
			for k, v := range grant.Context {
				ev.RequestContext.Authorizer[k] = v
			}
		}
		if origin != "" {
			ev.Headers["Origin"] = origin
		}
		ev.RequestContext.Identity.SourceIP = ip
		out, err := verify.Invoke(ev, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayProxyResponse
		if err := json.Unmarshal(out.Response, &resp); err != nil {
			t.Fatalf("reply %s / error %s", out.Response, out.Error)
		}
		return resp
	}

	r := call(http.MethodPost, origin, "198.51.100.1", true)
	var body map[string]any
	if r.StatusCode != http.StatusOK || json.Unmarshal([]byte(r.Body), &body) != nil {
		t.Fatalf("from its origin: %d %s", r.StatusCode, r.Body)
	}
	if _, ok := body["decision"]; ok || body["suggestion"] != "someone@gmail.com" || r.Headers["Access-Control-Allow-Origin"] != origin {
		t.Fatalf("reply %s %v, want the trimmed one with the origin allowed", r.Body, r.Headers)
	}
	if r := call(http.MethodPost, "https://evil.example", "198.51.100.2", true); r.StatusCode != http.StatusForbidden {
		t.Fatalf("another origin: %d %s, want 403", r.StatusCode, r.Body)
	}
	if r := call(http.MethodOptions, "https://any.example", "198.51.100.2", false); r.StatusCode != http.StatusNoContent ||
		r.Headers["Access-Control-Allow-Origin"] != "https://any.example" || r.Headers["Access-Control-Allow-Methods"] != "POST" {
		t.Fatalf("preflight: %d %v", r.StatusCode, r.Headers)
	}
	// The per-address limit, counted in DynamoDB, in windows of a
	// minute: within twice the limit's calls one is refused, even if a
	// minute ends in between.
	limited := false
	for range 2 * api.PublishablePerAddress {
		if r := call(http.MethodPost, origin, "198.51.100.1", true); r.StatusCode == http.StatusTooManyRequests {
			limited = true
			break
		} else if r.StatusCode != http.StatusOK {
			t.Fatalf("from its origin: %d %s", r.StatusCode, r.Body)
		}
	}
	if !limited {
		t.Fatalf("%d calls from one address: none refused", 2*api.PublishablePerAddress+1)
	}
	if r := call(http.MethodPost, origin, "198.51.100.3", true); r.StatusCode != http.StatusOK {
		t.Fatalf("another address: %d %s", r.StatusCode, r.Body)
	}
}
