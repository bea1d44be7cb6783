package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/authorizer"
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
		"--origin", "https://Shop.example", "--origin", "http://localhost:3000")
	key := strings.TrimSpace(out)
	if code != 0 || !publishableRE.MatchString(key) {
		t.Fatalf("create: %d %q %q", code, out, stderr)
	}
	id := authorizer.KeyID(authorizer.HashKey(key))
	_, list, _ := runEVS(ctx, env, "keys", "list")
	if !regexp.MustCompile(id + ` +shop +live +active +\S+ +publishable +https://shop.example,http://localhost:3000`).MatchString(list) {
		t.Fatalf("list:\n%s", list)
	}
	if code, out, _ := runEVS(ctx, env, "keys", "revoke", key); code != 0 || !strings.Contains(out, id) || strings.Contains(out, key) {
		t.Fatalf("revoke by the key: %d %q", code, out)
	}
}
