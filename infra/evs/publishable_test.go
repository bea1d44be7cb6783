package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
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

// TestKeysPublishableWithUsagePlan: on the AWS path (a usage plan, in
// moto) a publishable key is stored with its kind and origins and shares
// its account's usage-plan key with the account's secret keys, so API
// Gateway meters both together.
func TestKeysPublishableWithUsagePlan(t *testing.T) {
	ctx := context.Background()
	gw := apiGateway(t)
	plan := newPlan(t, gw)
	sq, err := sqlitestore.Open(ctx, t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	up := &usagePlan{api: gw, planID: plan, rand: rand.Reader}
	name := testkit.UniqueName(t, "shop")
	var out, errOut bytes.Buffer
	if err := createKey(ctx, sq, up, name, false, keySpec{}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	secret, err := sq.KeyByHash(ctx, authorizer.HashKey(strings.TrimSpace(out.String())))
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := createKey(ctx, sq, up, name, false, keySpec{publishable: true, origins: []string{"https://shop.example"}}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(out.String())
	pk, err := sq.KeyByHash(ctx, authorizer.HashKey(key))
	if err != nil || !publishableRE.MatchString(key) {
		t.Fatalf("publishable key %v: %v", publishableRE.MatchString(key), err)
	}
	if pk.Kind != evs.KeyPublishable || len(pk.Origins) != 1 || pk.Origins[0] != "https://shop.example" ||
		pk.UsageKeyID == "" || pk.UsageKeyID != secret.UsageKeyID {
		t.Fatalf("stored %+v; the secret key's usage key %q", pk, secret.UsageKeyID)
	}
}
