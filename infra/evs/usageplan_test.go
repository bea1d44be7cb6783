package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"
	"github.com/aws/aws-sdk-go-v2/service/apigateway/types"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
)

// apiGateway returns an API Gateway client of the shared moto server, as
// testkit builds its DynamoDB and SQS clients.
func apiGateway(t *testing.T) *apigateway.Client {
	t.Helper()
	return apigateway.NewFromConfig(testkit.AWSConfig(t))
}

// newPlan makes a REST API and a usage plan in moto and returns the plan ID.
func newPlan(t *testing.T, gw *apigateway.Client) string {
	t.Helper()
	ctx := context.Background()
	if _, err := gw.CreateRestApi(ctx, &apigateway.CreateRestApiInput{Name: aws.String(testkit.UniqueName(t, "api"))}); err != nil {
		t.Fatalf("create REST API in moto: %v", err)
	}
	out, err := gw.CreateUsagePlan(ctx, &apigateway.CreateUsagePlanInput{
		Name:     aws.String(testkit.UniqueName(t, "plan")),
		Throttle: &types.ThrottleSettings{RateLimit: 5, BurstLimit: 10},
		Quota:    &types.QuotaSettings{Limit: 1000, Period: types.QuotaPeriodTypeDay},
	})
	if err != nil {
		t.Fatalf("create usage plan in moto: %v", err)
	}
	return aws.ToString(out.Id)
}

// accountKeys returns the API Gateway keys named for the account, with
// their values.
func accountKeys(t *testing.T, gw *apigateway.Client, accountID string) []types.ApiKey {
	t.Helper()
	out, err := gw.GetApiKeys(context.Background(), &apigateway.GetApiKeysInput{NameQuery: aws.String(usageKeyName(accountID, evs.KeySecret)), IncludeValues: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetApiKeys: %v", err)
	}
	var ks []types.ApiKey
	for _, k := range out.Items {
		if aws.ToString(k.Name) == usageKeyName(accountID, evs.KeySecret) {
			ks = append(ks, k)
		}
	}
	return ks
}

// planKeyValues maps the IDs of the plan's keys to their values.
func planKeyValues(t *testing.T, gw *apigateway.Client, planID string) map[string]string {
	t.Helper()
	out, err := gw.GetUsagePlanKeys(context.Background(), &apigateway.GetUsagePlanKeysInput{UsagePlanId: aws.String(planID)})
	if err != nil {
		t.Fatalf("GetUsagePlanKeys: %v", err)
	}
	m := map[string]string{}
	for _, k := range out.Items {
		m[aws.ToString(k.Id)] = aws.ToString(k.Value)
	}
	return m
}

var usageValueRE = regexp.MustCompile(`^[A-Za-z0-9_-]{40}$`)

// TestKeysUsagePlan: `evs keys create --dynamodb-table --usage-plan` puts
// the account's API Gateway key in the plan, stores its value with the evs
// key, reuses it for the account's next key, and the authorizer returns it
// as the usage identifier key.
func TestKeysUsagePlan(t *testing.T) {
	ctx := context.Background()
	ddb := testkit.DynamoDB(t)
	gw := apiGateway(t)
	tables := dynamostore.Tables{Keys: testkit.UniqueName(t, "keys")}
	if err := dynamostore.CreateTables(ctx, ddb, tables); err != nil {
		t.Fatal(err)
	}
	plan := newPlan(t, gw)
	for k, v := range map[string]string{"AWS_ENDPOINT_URL": testkit.MotoEndpoint(t), "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"} {
		t.Setenv(k, v)
	}
	st := dynamostore.New(dynamostore.Config{Client: ddb, Tables: tables, Now: time.Now})

	code, out, stderr := runEVS(ctx, nil, "keys", "create", "--account", "cloud", "--dynamodb-table", tables.Keys, "--usage-plan", plan)
	key := strings.TrimSpace(out)
	if code != 0 || !keyRE.MatchString(key) || strings.Count(out, "\n") != 1 {
		t.Fatalf("create: %d %q %q", code, out, stderr)
	}
	a, err := st.AccountByName(ctx, "cloud")
	if err != nil {
		t.Fatalf("account: %v", err)
	}
	gwKeys := accountKeys(t, gw, a.ID)
	if len(gwKeys) != 1 {
		t.Fatalf("%d API Gateway keys named %s, want 1", len(gwKeys), usageKeyName(a.ID, evs.KeySecret))
	}
	gk := gwKeys[0]
	value := aws.ToString(gk.Value)
	if !gk.Enabled || !usageValueRE.MatchString(value) {
		t.Fatalf("API Gateway key: enabled %v, value of %d characters (want 40 base64url)", gk.Enabled, len(value))
	}
	if strings.Contains(out, value) || strings.Contains(stderr, value) {
		t.Fatal("the usage key value was printed")
	}
	if !strings.Contains(stderr, aws.ToString(gk.Id)) {
		t.Errorf("stderr does not name the API Gateway key id: %q", stderr)
	}
	if got, ok := planKeyValues(t, gw, plan)[aws.ToString(gk.Id)]; !ok || got != value {
		t.Fatalf("key %s is not in usage plan %s (value match %v)", aws.ToString(gk.Id), plan, got == value)
	}
	k1, err := st.KeyByHash(ctx, authorizer.HashKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if k1.UsageKeyID != value {
		t.Fatalf("stored UsageKeyID (%d chars) is not the API Gateway key's value", len(k1.UsageKeyID))
	}

	// The account's second key shares its usage key; the plan ID comes
	// from the environment this time.
	code, out, stderr = runEVS(ctx, map[string]string{envUsagePlan: plan}, "keys", "create", "--account", "cloud", "--dynamodb-table", tables.Keys)
	key2 := strings.TrimSpace(out)
	if code != 0 || !keyRE.MatchString(key2) || key2 == key {
		t.Fatalf("second create: %d %q %q", code, out, stderr)
	}
	k2, err := st.KeyByHash(ctx, authorizer.HashKey(key2))
	if err != nil {
		t.Fatal(err)
	}
	if k2.UsageKeyID != value {
		t.Fatal("the second key does not reuse the account's usage key")
	}
	if n := len(accountKeys(t, gw, a.ID)); n != 1 {
		t.Fatalf("%d API Gateway keys for the account after the second create, want 1", n)
	}

	// The authorizer hands API Gateway the usage key for both evs keys.
	auth := authorizer.New(st)
	for _, k := range []string{key, key2} {
		resp, err := lambda.Authorizer(auth)(ctx, events.APIGatewayCustomAuthorizerRequestTypeRequest{
			Type:      "REQUEST",
			MethodArn: "arn:aws:execute-api:us-east-1:123456789012:abcdef1234/prod/POST/v1/verify",
			Headers:   map[string]string{authorizer.HeaderName: k},
		})
		if err != nil {
			t.Fatalf("authorizer: %v", err)
		}
		if resp.UsageIdentifierKey != value {
			t.Fatalf("authorizer UsageIdentifierKey (%d chars) is not the usage key value", len(resp.UsageIdentifierKey))
		}
	}

	// A key removed from the plan by hand is put back by the next create.
	if _, err := gw.DeleteUsagePlanKey(ctx, &apigateway.DeleteUsagePlanKeyInput{UsagePlanId: aws.String(plan), KeyId: gk.Id}); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr = runEVS(ctx, nil, "keys", "create", "--account", "cloud", "--dynamodb-table", tables.Keys, "--usage-plan", plan); code != 0 {
		t.Fatalf("third create: %d %q %q", code, out, stderr)
	}
	if _, ok := planKeyValues(t, gw, plan)[aws.ToString(gk.Id)]; !ok {
		t.Fatal("the account's usage key was not put back in the plan")
	}
}

// TestKeysUsagePlanRefused: the ways `keys create` refuses to make a key
// outside a usage plan, and that they create nothing.
func TestKeysUsagePlanRefused(t *testing.T) {
	ctx := context.Background()
	ddb := testkit.DynamoDB(t)
	tables := dynamostore.Tables{Keys: testkit.UniqueName(t, "keys")}
	if err := dynamostore.CreateTables(ctx, ddb, tables); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"AWS_ENDPOINT_URL": testkit.MotoEndpoint(t), "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"} {
		t.Setenv(k, v)
	}
	st := dynamostore.New(dynamostore.Config{Client: ddb, Tables: tables, Now: time.Now})
	cases := []struct {
		name     string
		env      map[string]string
		args     []string
		code     int
		contains string
	}{
		{"no plan", nil, []string{"--dynamodb-table", tables.Keys}, 2, "needs --usage-plan"},
		{"empty plan variable", map[string]string{envUsagePlan: ""}, []string{"--dynamodb-table", tables.Keys}, 2, "needs --usage-plan"},
		{"plan without table", map[string]string{"EVS_DATA_DIR": t.TempDir()}, []string{"--usage-plan", "abc123"}, 2, "--usage-plan goes with --dynamodb-table"},
		{"unknown plan", nil, []string{"--dynamodb-table", tables.Keys, "--usage-plan", "nosuchplan"}, 1, "usage plan nosuchplan does not exist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"keys", "create", "--account", "refused"}, c.args...)
			code, out, stderr := runEVS(ctx, c.env, args...)
			// One line says what is wrong; a usage mistake (exit 2) is
			// followed by the command's usage line.
			first, rest, _ := strings.Cut(stderr, "\n")
			if code != c.code || out != "" || !strings.Contains(first, c.contains) || (code == 1) != (rest == "") || (code == 2) != strings.HasPrefix(rest, "usage: evs keys create") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and a line with %q", code, out, stderr, c.code, c.contains)
			}
			if _, err := st.AccountByName(ctx, "refused"); evs.ErrorCode(err) != evs.CodeNotFound {
				t.Fatalf("an account was created: %v", err)
			}
		})
	}
}

// failingKeys is a store whose CreateKey fails, as a DynamoDB write can.
type failingKeys struct{ store.Keys }

var errWrite = errors.New("write refused")

func (failingKeys) CreateKey(context.Context, evs.Key) error { return errWrite }

// failingPlanKey is API Gateway refusing to add a key to the plan.
type failingPlanKey struct{ usagePlanAPI }

var errPlanKey = errors.New("plan key refused")

func (failingPlanKey) CreateUsagePlanKey(context.Context, *apigateway.CreateUsagePlanKeyInput, ...func(*apigateway.Options)) (*apigateway.CreateUsagePlanKeyOutput, error) {
	return nil, errPlanKey
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("no entropy") }

// TestUsageKeyNothingHalfMade: when a step after the API Gateway key was
// made fails, the key is deleted again, and the error says what failed.
func TestUsageKeyNothingHalfMade(t *testing.T) {
	gw := apiGateway(t)
	plan := newPlan(t, gw)
	cases := []struct {
		name    string
		keys    func(store.Keys) store.Keys
		api     usagePlanAPI
		rand    io.Reader
		wantErr error
	}{
		{"store write fails", func(s store.Keys) store.Keys { return failingKeys{s} }, gw, nil, errWrite},
		{"plan refuses the key", func(s store.Keys) store.Keys { return s }, failingPlanKey{gw}, nil, errPlanKey},
		{"no randomness", func(s store.Keys) store.Keys { return s }, gw, failingReader{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			sq, err := sqlitestore.Open(ctx, t.TempDir(), time.Now)
			if err != nil {
				t.Fatal(err)
			}
			defer sq.Close()
			r := c.rand
			if r == nil {
				r = rand.Reader
			}
			up := &usagePlan{api: c.api, planID: plan, rand: r}
			var out, errOut bytes.Buffer
			err = createKey(ctx, c.keys(sq), up, "half", false, keySpec{}, &out, &errOut)
			if err == nil || (c.wantErr != nil && !errors.Is(err, c.wantErr)) {
				t.Fatalf("err %v, want %v", err, c.wantErr)
			}
			if out.Len() != 0 {
				t.Fatalf("a key was printed: %q", out.String())
			}
			a, err := sq.AccountByName(ctx, "half")
			if err != nil {
				t.Fatal(err)
			}
			if ks := accountKeys(t, gw, a.ID); len(ks) != 0 {
				t.Fatalf("%d API Gateway keys left for the account", len(ks))
			}
			if ks, _ := sq.ListKeys(ctx); len(ks) != 0 {
				t.Fatalf("%d evs keys stored", len(ks))
			}
		})
	}
}

// TestUsageKeyGone: when the usage key the account's keys carry is gone
// from API Gateway, a new one is made and the operator is warned.
func TestUsageKeyGone(t *testing.T) {
	ctx := context.Background()
	gw := apiGateway(t)
	plan := newPlan(t, gw)
	sq, err := sqlitestore.Open(ctx, t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	a := evs.Account{ID: "acct-" + testkit.UniqueName(t, "gone"), Name: "gone", CreatedAt: time.Now()}
	if err := sq.CreateAccount(ctx, a); err != nil {
		t.Fatal(err)
	}
	stale := strings.Repeat("s", 40)
	if _, err := authorizer.IssueKey(ctx, sq, a.ID, stale, time.Now()); err != nil {
		t.Fatal(err)
	}
	up := &usagePlan{api: gw, planID: plan, rand: rand.Reader}
	var out, errOut bytes.Buffer
	if err := createKey(ctx, sq, up, "gone", false, keySpec{}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "gone from API Gateway") {
		t.Fatalf("no warning: %q", errOut.String())
	}
	k, err := sq.KeyByHash(ctx, authorizer.HashKey(strings.TrimSpace(out.String())))
	if err != nil {
		t.Fatal(err)
	}
	ks := accountKeys(t, gw, a.ID)
	if k.UsageKeyID == stale || len(ks) != 1 || aws.ToString(ks[0].Value) != k.UsageKeyID {
		t.Fatalf("new key's usage key not the account's new API Gateway key (%d keys)", len(ks))
	}
	if _, ok := planKeyValues(t, gw, plan)[aws.ToString(ks[0].Id)]; !ok {
		t.Fatal("the new usage key is not in the plan")
	}
}

func TestNewUsageValue(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"zeros", make([]byte, usageValueBytes), strings.Repeat("A", 40)},
		{"ones", bytes.Repeat([]byte{0xff}, usageValueBytes), strings.Repeat("_", 40)},
		{"extra input is left unread", bytes.Repeat([]byte{0xfb}, usageValueBytes+5), strings.Repeat("-_v7", 10)},
	}
	for _, c := range cases {
		got, err := newUsageValue(bytes.NewReader(c.in))
		if err != nil || got != c.want {
			t.Errorf("%s: %q %v, want %q", c.name, got, err, c.want)
		}
	}
	if _, err := newUsageValue(bytes.NewReader(make([]byte, usageValueBytes-1))); err == nil {
		t.Error("a short read made a value")
	}
}

// resentCreate makes the key, then answers as API Gateway answers the SDK's
// resend of a create whose reply was lost: 409, the key already exists.
type resentCreate struct{ usagePlanAPI }

func (r resentCreate) CreateApiKey(ctx context.Context, in *apigateway.CreateApiKeyInput, opts ...func(*apigateway.Options)) (*apigateway.CreateApiKeyOutput, error) {
	if _, err := r.usagePlanAPI.CreateApiKey(ctx, in, opts...); err != nil {
		return nil, err
	}
	return nil, &types.ConflictException{Message: aws.String("API Key already exists")}
}

// TestUsageKeyLostCreateReply: a create whose reply was lost is recognised
// by its random value and the key is used, not reported as a conflict; a
// key of the same name made by someone else is still a conflict.
func TestUsageKeyLostCreateReply(t *testing.T) {
	ctx := context.Background()
	gw := apiGateway(t)
	plan := newPlan(t, gw)
	sq, err := sqlitestore.Open(ctx, t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	up := &usagePlan{api: resentCreate{gw}, planID: plan, rand: rand.Reader}
	var out, errOut bytes.Buffer
	if err := createKey(ctx, sq, up, "resent", false, keySpec{}, &out, &errOut); err != nil {
		t.Fatalf("create after a lost reply: %v (%s)", err, errOut.String())
	}
	a, err := sq.AccountByName(ctx, "resent")
	if err != nil {
		t.Fatal(err)
	}
	if ks := accountKeys(t, gw, a.ID); len(ks) != 1 {
		t.Fatalf("%d API Gateway keys for the account, want 1", len(ks))
	}
	// Someone else's key of the same name: the value differs, so the
	// conflict stands.
	other := &usagePlan{api: conflictOnly{gw}, planID: plan, rand: rand.Reader}
	if _, err := other.create(ctx, usageKeyName(a.ID, evs.KeySecret)); err == nil {
		t.Fatal("a conflict with a key we did not make was taken as ours")
	}
}

// conflictOnly answers every create with 409 without making anything.
type conflictOnly struct{ usagePlanAPI }

func (conflictOnly) CreateApiKey(context.Context, *apigateway.CreateApiKeyInput, ...func(*apigateway.Options)) (*apigateway.CreateApiKeyOutput, error) {
	return nil, &types.ConflictException{Message: aws.String("API Key already exists")}
}
