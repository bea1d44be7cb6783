package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

var publishableRE = regexp.MustCompile(`^evs_pk\.[A-Za-z0-9_-]{43}$`)

// TestKeysPublishable: `keys create --publishable --origin` makes an
// evs_pk. key bound to its origins, shown by `keys list`, revocable; a bad
// origin is a usage error that leaves no account behind.
func TestKeysPublishable(t *testing.T) {
	env := map[string]string{"EVS_DATA_DIR": t.TempDir()}
	ctx := context.Background()
	for _, args := range [][]string{
		{"--publishable"}, // no origin
		{"--publishable", "--origin", "http://shop.example"},
		{"--publishable", "--origin", "https://shop.example/path"},
		{"--origin", "https://shop.example"}, // origins without --publishable
		{"--rate", "5"},                      // limits without --publishable
		{"--publishable", "--origin", "https://shop.example", "--rate-per-address", "-1"},
	} {
		code, out, stderr := runEVS(ctx, env, append([]string{"keys", "create", "--account", "bad"}, args...)...)
		if code != 2 || out != "" || stderr == "" {
			t.Errorf("create %v: %d %q %q, want a usage error", args, code, out, stderr)
		}
	}
	if _, out, _ := runEVS(ctx, env, "keys", "list"); strings.Contains(out, "bad") {
		t.Fatalf("a refused create left an account:\n%s", out)
	}
	code, out, stderr := runEVS(ctx, env, "keys", "create", "--account", "shop", "--publishable",
		"--origin", "https://Shop.example", "--origin", "http://localhost:3000", "--rate", "1200", "--rate-per-address", "5")
	key := strings.TrimSpace(out)
	if code != 0 || !publishableRE.MatchString(key) {
		t.Fatalf("create: %d %q %q", code, out, stderr)
	}
	// The key comes with the tag that puts it in a page, on stderr.
	if tag := `<script src="http://127.0.0.1:8080/widget.js" data-key="` + key + `"></script>`; !strings.Contains(stderr, tag) {
		t.Errorf("create says %q, not the widget's tag %s", stderr, tag)
	}
	env["EVS_PUBLIC_URL"] = "https://evs.shop.example"
	if _, out, stderr := runEVS(ctx, env, "keys", "create", "--account", "shop", "--publishable", "--origin", "https://shop.example"); !strings.Contains(stderr, `<script src="https://evs.shop.example/widget.js" data-key="`+strings.TrimSpace(out)+`">`) {
		t.Errorf("with EVS_PUBLIC_URL: %q", stderr)
	}
	delete(env, "EVS_PUBLIC_URL")
	if _, _, stderr := runEVS(ctx, env, "keys", "create", "--account", "shop2"); strings.Contains(stderr, "<script") {
		t.Errorf("a secret key came with a page's tag: %q", stderr)
	}
	id := authorizer.KeyID(authorizer.HashKey(key))
	_, list, _ := runEVS(ctx, env, "keys", "list")
	if !regexp.MustCompile(id + ` +shop +live +active +\S+ +publishable +https://shop.example,http://localhost:3000 +5/1200\n`).MatchString(list) {
		t.Fatalf("list:\n%s", list)
	}
	if code, out, _ := runEVS(ctx, env, "keys", "revoke", key); code != 0 || !strings.Contains(out, id) || strings.Contains(out, key) {
		t.Fatalf("revoke by the key: %d %q", code, out)
	}
}

// TestKeysPublishableWithUsagePlan: on the AWS path (usage plans, in moto)
// a publishable key is stored with its kind and origins and gets an API
// Gateway key of its own, which the account's next publishable key shares
// and its secret keys never do; it sits in the plan the stack's plan names
// by its publishablePlanTag (template.yaml: throttle and quota set apart),
// or, on a plan without the tag, in the same plan. The authorizer hands
// each kind's to API Gateway as the usage identifier. API Gateway meters
// throttle and quota per API key, so a flood with a page's key, however
// long, spends nothing of the secret keys' calls a day. A publishable key
// made before (carrying the secret keys' usage key) is not followed: the
// next one still gets its own.
func TestKeysPublishableWithUsagePlan(t *testing.T) {
	for _, own := range []bool{true, false} {
		t.Run(map[bool]string{true: "a plan of their own", false: "one plan"}[own], func(t *testing.T) {
			ctx := context.Background()
			gw := apiGateway(t)
			plan, pubPlan := newPlan(t, gw), ""
			if own {
				out, err := gw.CreateUsagePlan(ctx, &apigateway.CreateUsagePlanInput{Name: aws.String(testkit.UniqueName(t, "plan")),
					Tags: map[string]string{publishablePlanTag: plan}})
				if err != nil {
					t.Fatal(err)
				}
				pubPlan, plan = plan, aws.ToString(out.Id)
			}
			checkPublishableUsageKeys(t, gw, plan, cmp.Or(pubPlan, plan))
		})
	}
}

func checkPublishableUsageKeys(t *testing.T, gw *apigateway.Client, plan, pubPlan string) {
	ctx := context.Background()
	sq, err := sqlitestore.Open(ctx, t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	up := &usagePlan{api: gw, planID: plan, rand: rand.Reader}
	name := testkit.UniqueName(t, "shop")
	widget := keySpec{publishable: true, origins: []string{"https://shop.example"}}
	create := func(spec keySpec) (string, evs.Key) {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := createKey(ctx, sq, up, name, false, spec, &out, &errOut); err != nil {
			t.Fatal(err)
		}
		key := strings.TrimSpace(out.String())
		k, err := sq.KeyByHash(ctx, authorizer.HashKey(key))
		if err != nil {
			t.Fatal(err)
		}
		return key, k
	}
	secretKey, secret := create(keySpec{})
	// A publishable key of before: it carries the secret keys' usage key.
	if _, err := authorizer.Issue(ctx, sq, evs.Key{AccountID: secret.AccountID, UsageKeyID: secret.UsageKeyID,
		Kind: evs.KeyPublishable, Origins: widget.origins}, time.Now()); err != nil {
		t.Fatal(err)
	}
	pkKey, pk := create(widget)
	_, pk2 := create(widget)
	_, secret2 := create(keySpec{})
	if !publishableRE.MatchString(pkKey) || pk.Kind != evs.KeyPublishable || len(pk.Origins) != 1 || pk.Origins[0] != "https://shop.example" {
		t.Fatalf("publishable key %v stored %+v", publishableRE.MatchString(pkKey), pk)
	}
	if pk.UsageKeyID == "" || pk.UsageKeyID == secret.UsageKeyID || pk2.UsageKeyID != pk.UsageKeyID || secret2.UsageKeyID != secret.UsageKeyID {
		t.Fatalf("usage keys: secret %q and %q, publishable %q and %q: want one per kind", secret.UsageKeyID, secret2.UsageKeyID, pk.UsageKeyID, pk2.UsageKeyID)
	}
	inPlan := map[string]int{}
	for _, p := range slices.Compact([]string{plan, pubPlan}) {
		for _, v := range planKeyValues(t, gw, p) {
			inPlan[p+" "+v]++
		}
	}
	if len(inPlan) != 2 || inPlan[plan+" "+secret.UsageKeyID] != 1 || inPlan[pubPlan+" "+pk.UsageKeyID] != 1 {
		t.Fatalf("the plans hold %d API keys, want the secret keys' in %s and the publishable keys' in %s", len(inPlan), plan, pubPlan)
	}
	az := lambda.Authorizer(authorizer.New(sq))
	for key, want := range map[string]string{secretKey: secret.UsageKeyID, pkKey: pk.UsageKeyID} {
		resp, err := az(ctx, events.APIGatewayCustomAuthorizerRequestTypeRequest{Type: "REQUEST",
			MethodArn: "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/POST/v1/verify", Headers: map[string]string{"X-Api-Key": key}})
		if err != nil || resp.UsageIdentifierKey != want {
			t.Fatalf("the authorizer's usage identifier is not the key kind's own (%v)", err)
		}
	}
}
