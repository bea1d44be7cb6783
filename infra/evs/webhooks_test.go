package main

import (
	"context"
	"strings"
	"testing"
)

func TestWebhooksSecretCommand(t *testing.T) {
	env := map[string]string{"EVS_DATA_DIR": t.TempDir()}
	ctx := context.Background()
	for _, args := range [][]string{{"webhooks"}, {"webhooks", "secret"}, {"webhooks", "rotate"}, {"webhooks", "secret", "--account", "a", "extra"}} {
		if code, _, stderr := runEVS(ctx, env, args...); code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, want 2 with usage", args, code)
		}
	}
	if code, _, _ := runEVS(ctx, env, "webhooks", "secret", "--account", "nobody"); code != 1 {
		t.Errorf("unknown account: exit %d, want 1", code)
	}
	if code, _, stderr := runEVS(ctx, env, "keys", "create", "--account", "acme"); code != 0 {
		t.Fatalf("keys create: %s", stderr)
	}
	secret := func(args ...string) string {
		t.Helper()
		code, out, stderr := runEVS(ctx, env, append([]string{"webhooks", "secret", "--account", "acme"}, args...)...)
		s := strings.TrimSpace(out)
		if code != 0 || !strings.HasPrefix(s, "whsec_") || strings.Count(out, "\n") != 1 {
			t.Fatalf("webhooks secret %v: exit %d %q %q", args, code, out, stderr)
		}
		return s
	}
	first := secret()
	if again := secret(); again != first {
		t.Fatal("a second call made another secret")
	}
	rotated := secret("--rotate")
	if rotated == first {
		t.Fatal("--rotate kept the secret")
	}
	if now := secret(); now != rotated {
		t.Fatal("after --rotate the current secret is not the new one")
	}
}
