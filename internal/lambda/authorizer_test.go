package lambda_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

const methodArn = "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/POST/v1/verify"

// seed opens a store holding testkit.SeedKeys's accounts and keys.
func seed(t testing.TB) (*sqlitestore.Store, testkit.SeededKeys) {
	t.Helper()
	clock := testkit.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	st, err := sqlitestore.Open(context.Background(), freshStoreDir(t), clock.Now)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, testkit.SeedKeys(t, st, clock.Now())
}

func keyID(k string) string { return authorizer.KeyID(authorizer.HashKey(k)) }

func request(headers map[string]string, multi map[string][]string) events.APIGatewayCustomAuthorizerRequestTypeRequest {
	return events.APIGatewayCustomAuthorizerRequestTypeRequest{
		Type: "REQUEST", MethodArn: methodArn, Headers: headers, MultiValueHeaders: multi,
	}
}

func TestHandle(t *testing.T) {
	st, ks := seed(t)
	unknown, _ := authorizer.NewKey()
	az := authorizer.New(st)
	const stage = "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/*/*"
	tests := []struct {
		name    string
		headers map[string]string
		multi   map[string][]string
		// want is "Unauthorized", "Deny" or "Allow".
		want      string
		principal string
		context   map[string]any
		usage     string
	}{
		{name: "missing", headers: map[string]string{"Content-Type": "application/json"}, want: "Unauthorized"},
		{name: "no headers at all", want: "Unauthorized"},
		{name: "empty", headers: map[string]string{"X-Api-Key": ""}, want: "Unauthorized"},
		{name: "malformed prefix", headers: map[string]string{"X-Api-Key": "sk_" + ks.Live[4:]}, want: "Unauthorized"},
		{name: "malformed short", headers: map[string]string{"X-Api-Key": ks.Live[:20]}, want: "Unauthorized"},
		{name: "malformed padding bits", headers: map[string]string{"X-Api-Key": ks.Live[:len(ks.Live)-1] + "_"}, want: "Unauthorized"},
		{name: "surrounding space", headers: map[string]string{"X-Api-Key": " " + ks.Live}, want: "Unauthorized"},
		{name: "unknown", headers: map[string]string{"X-Api-Key": unknown}, want: "Unauthorized"},
		{name: "revoked", headers: map[string]string{"X-Api-Key": ks.Revoked}, want: "Deny", principal: keyID(ks.Revoked)},
		{name: "suspended account", headers: map[string]string{"X-Api-Key": ks.Suspended}, want: "Deny", principal: keyID(ks.Suspended)},
		{name: "ok", headers: map[string]string{"X-Api-Key": ks.Live}, want: "Allow", principal: keyID(ks.Live),
			context: map[string]any{"accountId": "acct-live", "keyId": keyID(ks.Live), "testMode": "false"}},
		{name: "test account", headers: map[string]string{"X-Api-Key": ks.Test}, want: "Allow", principal: keyID(ks.Test),
			context: map[string]any{"accountId": "acct-test", "keyId": keyID(ks.Test), "testMode": "true"}},
		{name: "usage plan key", headers: map[string]string{"X-Api-Key": ks.Usage}, want: "Allow", principal: keyID(ks.Usage),
			context: map[string]any{"accountId": "acct-live", "keyId": keyID(ks.Usage), "testMode": "false"}, usage: "usage-key-1"},
		{name: "lower-case header", headers: map[string]string{"x-api-key": ks.Live}, want: "Allow", principal: keyID(ks.Live),
			context: map[string]any{"accountId": "acct-live", "keyId": keyID(ks.Live), "testMode": "false"}},
		{name: "mixed-case header", headers: map[string]string{"X-API-KEY": ks.Test}, want: "Allow", principal: keyID(ks.Test),
			context: map[string]any{"accountId": "acct-test", "keyId": keyID(ks.Test), "testMode": "true"}},
		{name: "multi-value only", multi: map[string][]string{"x-Api-key": {ks.Live}}, want: "Allow", principal: keyID(ks.Live),
			context: map[string]any{"accountId": "acct-live", "keyId": keyID(ks.Live), "testMode": "false"}},
		{name: "both maps agree", headers: map[string]string{"X-Api-Key": ks.Live}, multi: map[string][]string{"X-Api-Key": {ks.Live}}, want: "Allow", principal: keyID(ks.Live),
			context: map[string]any{"accountId": "acct-live", "keyId": keyID(ks.Live), "testMode": "false"}},
		{name: "two different keys", headers: map[string]string{"X-Api-Key": ks.Live}, multi: map[string][]string{"X-Api-Key": {ks.Test, ks.Live}}, want: "Unauthorized"},
		{name: "two spellings disagree", headers: map[string]string{"X-Api-Key": ks.Live, "x-api-key": ks.Test}, want: "Unauthorized"},
		{name: "empty multi-value list", multi: map[string][]string{"X-Api-Key": {}}, want: "Unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := lambda.Authorizer(az)(context.Background(), request(tt.headers, tt.multi))
			if tt.want == "Unauthorized" {
				if err == nil || err.Error() != "Unauthorized" {
					t.Fatalf("err %v, want exactly \"Unauthorized\"", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if resp.PrincipalID != tt.principal {
				t.Errorf("principal %q, want %q", resp.PrincipalID, tt.principal)
			}
			doc := resp.PolicyDocument
			if doc.Version != "2012-10-17" || len(doc.Statement) != 1 {
				t.Fatalf("policy %+v", doc)
			}
			s := doc.Statement[0]
			// Never the method ARN: it holds the client's path, and a
			// policy resource is a pattern.
			wantRes := stage
			if s.Effect != tt.want || len(s.Action) != 1 || s.Action[0] != "execute-api:Invoke" || len(s.Resource) != 1 || s.Resource[0] != wantRes {
				t.Fatalf("statement %+v, want %s on %s", s, tt.want, wantRes)
			}
			if tt.want == "Deny" && len(resp.Context) != 0 {
				t.Errorf("deny carries a context: %v", resp.Context)
			}
			if len(resp.Context) != len(tt.context) {
				t.Errorf("context %v, want %v", resp.Context, tt.context)
			}
			for k, v := range tt.context {
				if resp.Context[k] != v {
					t.Errorf("context[%s] = %#v, want %#v", k, resp.Context[k], v)
				}
			}
			if resp.UsageIdentifierKey != tt.usage {
				t.Errorf("usage key %q, want %q", resp.UsageIdentifierKey, tt.usage)
			}
		})
	}
}

func TestStoreFailure(t *testing.T) {
	st, ks := seed(t)
	az := authorizer.New(st)
	_ = st.Close()
	for _, key := range []string{ks.Live, ks.Revoked} {
		_, err := lambda.Authorizer(az)(context.Background(), request(map[string]string{"X-Api-Key": key}, nil))
		if err == nil || err.Error() == "Unauthorized" {
			t.Fatalf("closed store: err %v, want a failure that is not a 401", err)
		}
		if errors.Is(err, authorizer.ErrUnauthorized) || errors.Is(err, authorizer.ErrForbidden) {
			t.Fatalf("store failure matches a sentinel: %v", err)
		}
		if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), key[4:]) {
			t.Fatalf("error carries the key: %v", err)
		}
	}
	// A malformed key is refused without asking the store.
	if _, err := lambda.Authorizer(az)(context.Background(), request(map[string]string{"X-Api-Key": "evs.nope"}, nil)); err == nil || err.Error() != "Unauthorized" {
		t.Fatalf("malformed key with a closed store: %v", err)
	}
}

func TestStageResource(t *testing.T) {
	tests := []struct {
		arn, want string
	}{
		{methodArn, "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/*/*"},
		{"arn:aws:execute-api:us-east-1:000000000000:evs/local/GET/v1/requests/b_1/results", "arn:aws:execute-api:us-east-1:000000000000:evs/local/*/*"},
		{"arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/GET/", "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/*/*"},
		{"arn:aws-cn:execute-api:cn-north-1:123456789012:abc123/prod/POST/v1/verify", "arn:aws-cn:execute-api:cn-north-1:123456789012:abc123/prod/*/*"},
		{"", ""},
		{"not an arn", ""},
		{"arn:aws:lambda:eu-west-1:123456789012:abc123/prod/POST/v1/verify", ""},
		{"arn:aws:execute-api:eu-west-1:123456789012", ""},
		{"arn:aws:execute-api::123456789012:abc123/prod/POST/x", ""},
		{"arn:aws:execute-api:eu-west-1::abc123/prod/POST/x", ""},
		{"arn:aws:execute-api:eu-west-1:123456789012:abc123", ""},
		{"arn:aws:execute-api:eu-west-1:123456789012:abc123/prod", ""},
		{"arn:aws:execute-api:eu-west-1:123456789012:/prod/POST/x", ""},
		{"arn:aws:execute-api:eu-west-1:123456789012:abc123//POST/x", ""},
		{"arn:aws:execute-api:eu-west-1:123456789012:*/prod/POST/x", ""},
		{"arn:aws:execute-api:eu-west-1:*:abc123/prod/POST/x", ""},
		{"arn:aws:execute-api:eu-west-1:123456789012:abc123/pr?d/POST/x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.arn, func(t *testing.T) {
			got, err := lambda.StageResource(tt.arn)
			if got != tt.want || (err == nil) != (tt.want != "") {
				t.Fatalf("StageResource = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestHandleMalformedMethodArn(t *testing.T) {
	st, ks := seed(t)
	az := authorizer.New(st)
	req := request(map[string]string{"X-Api-Key": ks.Live}, nil)
	req.MethodArn = "garbage"
	if _, err := lambda.Authorizer(az)(context.Background(), req); err == nil || err.Error() == "Unauthorized" {
		t.Fatalf("allowed key with a malformed method ARN: %v, want a 500-type error", err)
	}
}

// FuzzHandle feeds arbitrary header values: Handle never panics, never
// allows anything but a seeded key, and never returns the key in an error.
func FuzzHandle(f *testing.F) {
	st, ks := seed(f)
	az := authorizer.New(st)
	for _, s := range []string{"", ks.Live, ks.Revoked, "evs.", "evs." + strings.Repeat("A", 43), ks.Live + "x", "\x00", "évs.ü"} {
		f.Add("X-Api-Key", s)
	}
	f.Add("x-api-key", ks.Test)
	f.Fuzz(func(t *testing.T, name, value string) {
		resp, err := lambda.Authorizer(az)(context.Background(), request(map[string]string{name: value}, map[string][]string{name: {value}}))
		if err != nil {
			if err.Error() != "Unauthorized" {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		switch value {
		case ks.Live, ks.Test, ks.Usage:
			if resp.PolicyDocument.Statement[0].Effect != "Allow" {
				t.Fatalf("good key not allowed")
			}
		case ks.Revoked, ks.Suspended:
			if resp.PolicyDocument.Statement[0].Effect != "Deny" {
				t.Fatalf("bad key not denied")
			}
		default:
			t.Fatalf("a value that is no seeded key got a policy: %+v", resp)
		}
		if !strings.EqualFold(name, authorizer.HeaderName) {
			t.Fatalf("header %q taken for the key", name)
		}
	})
}

// TestDenyNeverNamesThePath: the policy for a revoked key covers the stage,
// so the client's path — which may be full of '*' — never becomes part of
// a pattern the gateway matches.
func TestDenyNeverNamesThePath(t *testing.T) {
	st, ks := seed(t)
	az := authorizer.New(st)
	req := request(map[string]string{"X-Api-Key": ks.Revoked}, nil)
	req.MethodArn = "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/GET/v1/requests/" + strings.Repeat("*", 50) + "/results"
	resp, err := lambda.Authorizer(az)(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	s := resp.PolicyDocument.Statement[0]
	if s.Effect != "Deny" || len(s.Resource) != 1 || s.Resource[0] != "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/*/*" {
		t.Fatalf("statement %+v, want Deny on the stage", s)
	}
}

// freshStoreDir is a new directory holding a fresh SQLite store's files.
func freshStoreDir(t testing.TB) string {
	return testkit.FreshDir(t, "sqlite", func(d string) (io.Closer, error) {
		return sqlitestore.Open(context.Background(), d, time.Now)
	})
}
