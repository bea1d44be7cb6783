package main

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestRevokeWhileServing: `evs keys revoke`, run beside a running `evs
// serve` (its own store handle, as another process has), is refused from
// the key's next call, although the server caches the authorizer's
// answers for EVS_AUTH_TTL (300 s); on the embedded store the command says
// nothing of a delay.
func TestRevokeWhileServing(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"EVS_DATA_DIR": dir, "EVS_ADDR": "127.0.0.1:0", "EVS_SMTP": "off", "EVS_DNS_SERVERS": "127.0.0.1:9"}
	srv := serveInProcess(t, env, "--test-account")
	base := regexp.MustCompile(`listening on (http://[0-9.:]+)`).FindStringSubmatch(srv.out.String())[1]
	key := printedKey.FindStringSubmatch(srv.out.String())[1]
	call := func() int {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/v1/verify", strings.NewReader(`{"email":"a@x.example","mode":"quick"}`))
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := 0; i < 2; i++ { // the second from the gateway's cache
		if s := call(); s != 200 {
			t.Fatalf("call %d before the revocation: %d", i, s)
		}
	}
	code, out, stderr := runEVS(context.Background(), map[string]string{"EVS_DATA_DIR": dir}, "keys", "revoke", key)
	if code != 0 || !strings.HasPrefix(out, "revoked key ") || stderr != "" {
		t.Fatalf("keys revoke: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if s := call(); s != 403 {
		t.Fatalf("the next call with the revoked key: %d, want 403", s)
	}
}

// TestRevokeOnAWSSaysTheDelay: on DynamoDB, `evs keys revoke` says, in one
// line on stderr, how long API Gateway may still accept the key.
func TestRevokeOnAWSSaysTheDelay(t *testing.T) {
	ddb := testkit.DynamoDB(t)
	tables := dynamostore.Tables{Keys: testkit.UniqueName(t, "keys")}
	if err := dynamostore.CreateTables(context.Background(), ddb, tables); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"AWS_ENDPOINT_URL": testkit.MotoEndpoint(t), "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"} {
		t.Setenv(k, v)
	}
	plan := newPlan(t, apiGateway(t))
	code, out, stderr := runEVS(context.Background(), nil, "keys", "create", "--account", "cloud", "--dynamodb-table", tables.Keys, "--usage-plan", plan)
	if code != 0 {
		t.Fatalf("create: %d %q", code, stderr)
	}
	key := strings.TrimSpace(out)
	code, out, stderr = runEVS(context.Background(), nil, "keys", "revoke", key, "--dynamodb-table", tables.Keys)
	want := "up to " + strconv.Itoa(awsAuthorizerCacheSeconds) + " s"
	if code != 0 || !strings.HasPrefix(out, "revoked key ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, want) || strings.Contains(stderr, key) {
		t.Fatalf("revoke: exit %d, stdout %q, stderr %q; want one line saying %q", code, out, stderr, want)
	}
}

// TestAuthorizerCacheMatchesTemplate: the delay `evs keys revoke` states is
// the template's authorizer cache.
func TestAuthorizerCacheMatchesTemplate(t *testing.T) {
	b, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*ReauthorizeEvery:\s*(\d+)\s*$`).FindAllStringSubmatch(string(b), -1)
	if len(m) != 1 || m[0][1] != strconv.Itoa(awsAuthorizerCacheSeconds) {
		t.Fatalf("template.yaml ReauthorizeEvery %v; evs keys revoke states %d s", m, awsAuthorizerCacheSeconds)
	}
}
