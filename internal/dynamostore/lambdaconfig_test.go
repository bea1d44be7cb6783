package dynamostore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/dynamostore"
)

// TestLambdaConfig: the configuration a function's environment gives, and
// one line naming what is missing.
func TestLambdaConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		env      map[string]string
		region   string
		endpoint string
		err      string
	}{
		{"Lambda's environment", map[string]string{"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "tok"}, "eu-west-1", "", ""},
		{"the default region, a local endpoint", map[string]string{"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_ENDPOINT_URL": "http://127.0.0.1:5000"}, "us-east-1", "http://127.0.0.1:5000", ""},
		{"no region", map[string]string{"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s"}, "", "", "AWS_REGION"},
		{"no credentials", map[string]string{"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "a"}, "", "", "AWS_SECRET_ACCESS_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := dynamostore.LambdaConfig(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil || cfg.Region != tc.region {
				t.Fatalf("region %q, %v", cfg.Region, err)
			}
			if got := ""; cfg.BaseEndpoint != nil {
				got = *cfg.BaseEndpoint
				if got != tc.endpoint {
					t.Fatalf("endpoint %q, want %q", got, tc.endpoint)
				}
			} else if tc.endpoint != "" {
				t.Fatalf("no endpoint, want %q", tc.endpoint)
			}
			c, err := cfg.Credentials.Retrieve(context.Background())
			if err != nil || c.AccessKeyID != tc.env["AWS_ACCESS_KEY_ID"] || c.SessionToken != tc.env["AWS_SESSION_TOKEN"] {
				t.Fatalf("credentials %+v, %v", c, err)
			}
		})
	}
}
