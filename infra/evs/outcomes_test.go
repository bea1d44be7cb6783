package main

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/api"
)

// TestOutcomesSNSURLCommand: the URL names the account and carries the
// token of its current webhook secret; rotating the secret changes it.
func TestOutcomesSNSURLCommand(t *testing.T) {
	env := map[string]string{"EVS_DATA_DIR": t.TempDir()}
	ctx := context.Background()
	for _, args := range [][]string{{"outcomes", "sns-url"}, {"outcomes", "sns-url", "--account", "acme"}, {"outcomes", "sns-url", "--account", "acme", "--base-url", "ftp://x"}} {
		if code, _, stderr := runEVS(ctx, env, args...); code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, want 2 with usage", args, code)
		}
	}
	if code, _, stderr := runEVS(ctx, env, "keys", "create", "--account", "acme"); code != 0 {
		t.Fatalf("keys create: %s", stderr)
	}
	snsURL := func() *url.URL {
		t.Helper()
		code, out, stderr := runEVS(ctx, env, "outcomes", "sns-url", "--account", "acme", "--base-url", "https://evs.example.com/")
		u, err := url.Parse(strings.TrimSpace(out))
		if code != 0 || err != nil || u.Scheme != "https" || u.Host != "evs.example.com" || u.Path != "/v1/outcomes/sns" {
			t.Fatalf("sns-url: exit %d %q %q", code, out, stderr)
		}
		return u
	}
	u := snsURL()
	_, secret, _ := runEVS(ctx, env, "webhooks", "secret", "--account", "acme")
	q := u.Query()
	if !api.SNSTokenValid(q.Get("token"), q.Get("account"), []string{strings.TrimSpace(secret)}) {
		t.Errorf("the token is not the account's under its webhook secret: %s", u)
	}
	if code, _, _ := runEVS(ctx, env, "webhooks", "secret", "--account", "acme", "--rotate"); code != 0 {
		t.Fatal("rotate")
	}
	if snsURL().Query().Get("token") == q.Get("token") {
		t.Error("rotating the webhook secret kept the token")
	}
}
