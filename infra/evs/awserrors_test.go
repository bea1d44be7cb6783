package main

import (
	"context"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestMissingTableSaysWhatToDo: a keys command on a DynamoDB table that
// does not exist (in the region in use) fails at once with one line that
// names the table, the flag, the region and the fix, not "unavailable;
// retry"; a region that cannot be one is named before anything is asked.
func TestMissingTableSaysWhatToDo(t *testing.T) {
	ddb := testkit.DynamoDB(t)
	tables := dynamostore.Tables{Keys: testkit.UniqueName(t, "keys")}
	if err := dynamostore.CreateTables(context.Background(), ddb, tables); err != nil {
		t.Fatal(err)
	}
	moto := testkit.MotoEndpoint(t)
	for k, v := range map[string]string{"AWS_ENDPOINT_URL": moto, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_CONFIG_FILE": "/nonexistent"} {
		t.Setenv(k, v)
	}
	plan := newPlan(t, apiGateway(t))
	cases := []struct {
		name   string
		region string
		args   []string
		want   []string
	}{
		{"list", "", []string{"keys", "list", "--dynamodb-table", "nope"}, []string{`DynamoDB table "nope" (--dynamodb-table) does not exist in region us-east-1`, "KeysTable", "sam deploy"}},
		{"revoke", "", []string{"keys", "revoke", "--dynamodb-table", "nope", "abc"}, []string{`table "nope"`}},
		{"create", "", []string{"keys", "create", "--account", "a", "--dynamodb-table", "nope", "--usage-plan", plan}, []string{`table "nope"`}},
		{"webhooks", "", []string{"webhooks", "secret", "--account", "a", "--dynamodb-table", "nope"}, []string{`table "nope"`}},
		{"wrong region", "eu-west-1", []string{"keys", "list", "--dynamodb-table", tables.Keys}, []string{`table "` + tables.Keys + `"`, "region eu-west-1", "AWS_REGION"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.region != "" {
				t.Setenv("AWS_REGION", c.region)
			}
			code, out, stderr := runEVS(context.Background(), nil, c.args...)
			if code != 1 || out != "" || strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, "unavailable") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 1 and one line", code, out, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
		})
	}
	// Nothing was made in the plan's API Gateway by the refused create.
	if keys := planKeyValues(t, apiGateway(t), plan); len(keys) != 0 {
		t.Errorf("the refused create left usage keys: %v", keys)
	}

	// Without an endpoint of its own, a region name that cannot be one is
	// refused before any call.
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_REGION", "us-east")
	code, _, stderr := runEVS(context.Background(), nil, "keys", "list", "--dynamodb-table", tables.Keys)
	if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, `AWS region "us-east" is not a region name`) {
		t.Fatalf("bad region: exit %d, %q", code, stderr)
	}
}
