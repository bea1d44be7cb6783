package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
)

const widgetOrigin = "https://shop.example"

// publishable issues the account a publishable key for widgetOrigin with
// limits.
func (s *suite) publishable(t *testing.T, acct string, limits evs.KeyLimits) string {
	t.Helper()
	key, err := authorizer.Issue(context.Background(), s.keys(), evs.Key{AccountID: acct, Kind: evs.KeyPublishable,
		Origins: []string{widgetOrigin}, Limits: limits}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// widget is the widget's call: POST /v1/verify with key from its page,
// made by the client at address client.
func (s *suite) widget(t *testing.T, key, email, client string) reply {
	t.Helper()
	return s.do(t, key, httpCall{method: http.MethodPost, path: "/v1/verify", body: `{"email":"` + email + `"}`,
		headers: map[string]string{"Origin": widgetOrigin, "X-Forwarded-For": client}})
}

// TestPublishableCannotLockOut (contract, section 17): under a quota of 40
// addresses a day, a web page's publishable key uses at most its share
// (10 %, so 4 addresses): 60 widget calls from 6 client addresses get 4
// answers and 429 for the rest, and the account's secret key still gets
// 200. A hard bounce the account reported makes the secret key's verdict
// known_bounce, but the publishable key's reply carries nothing of it,
// only status, reason, score, suggestion and flags.
func TestPublishableCannotLockOut(t *testing.T) {
	t.Parallel()
	forEachDeployment(t, suiteOptions{rcpt: suiteRcpt, env: map[string]string{
		"EVS_QUOTA_ADDRESSES": "40", "EVS_QUOTA_PERIOD": "day", "EVS_TRUSTED_PROXIES": "127.0.0.1/32",
	}}, func(t *testing.T, s *suite) {
		acct, secret := s.account(t, false)
		pk := s.publishable(t, acct, evs.KeyLimits{})

		const bob = "ok-bob@good.example"
		s.verifyAddr(t, secret, bob, "")
		body := fmt.Sprintf(`{"outcomes":[{"email":%q,"outcome":"bounced","bounceType":"hard","at":%q}]}`, bob, time.Now().UTC().Format(time.RFC3339))
		if r := s.do(t, secret, httpCall{method: http.MethodPost, path: "/v1/outcomes", body: body}); r.status != http.StatusOK {
			t.Fatalf("report the bounce: %d %s", r.status, r.body)
		}
		if d := s.verifyAddr(t, secret, bob, ""); d["reason"] != "known_bounce" {
			t.Fatalf("secret key after the bounce: %v, want known_bounce", d["reason"])
		}
		r := s.widget(t, pk, bob, "198.51.100.1")
		var reply map[string]any
		if err := json.Unmarshal(r.body, &reply); r.status != http.StatusOK || err != nil {
			t.Fatalf("publishable key: %d %s", r.status, r.body)
		}
		fields := []string{}
		for k := range reply {
			fields = append(fields, k)
		}
		slices.Sort(fields)
		if reply["reason"] == "known_bounce" || reply["status"] == "undeliverable" ||
			!slices.Equal(fields, []string{"flags", "reason", "requestId", "score", "status", "suggestion"}) {
			t.Fatalf("publishable reply carries the account's history or more: %s", r.body)
		}

		ok, refused := 1, 0
		for i := range 60 {
			r := s.widget(t, pk, fmt.Sprintf("ok-%d@good.example", i), fmt.Sprintf("198.51.100.%d", 10+i%6))
			switch {
			case r.status == http.StatusOK:
				ok++
			case r.status == http.StatusTooManyRequests && strings.Contains(string(r.body), "publishable keys' share"):
				refused++
			default:
				t.Fatalf("widget call %d: %d %s", i+1, r.status, r.body)
			}
		}
		if ok != 4 || refused != 57 {
			t.Errorf("widget calls answered %d, refused %d: want the share, 4, answered", ok, refused)
		}
		if d := s.verifyAddr(t, secret, "ok-alice@good.example", ""); d["reason"] == nil {
			t.Fatalf("secret key after the widget's flood: %v", d)
		}
	})
}

// TestPublishableKeyLimits: a key made with its own limits (`evs keys
// create --rate 3 --rate-per-address 2`) is held to them: the third call
// from one address is 429, another address gets through, and the key's
// fourth call in the minute is 429 from any address. The runtimes' clock
// stands still, so the calls are all in one minute (AWS counts a key's
// calls by calendar minute) and no token comes back (evs serve's buckets
// refill with time).
func TestPublishableKeyLimits(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Now())
	forEachDeployment(t, suiteOptions{rcpt: suiteRcpt, env: map[string]string{"EVS_TRUSTED_PROXIES": "127.0.0.1/32"}, now: clock.Now}, func(t *testing.T, s *suite) {
		acct, _ := s.account(t, true)
		pk := s.publishable(t, acct, evs.KeyLimits{PerAddress: 2, PerKey: 3})
		for i, want := range []struct {
			client string
			status int
		}{{"198.51.100.1", 200}, {"198.51.100.1", 200}, {"198.51.100.1", 429}, {"198.51.100.2", 200}, {"198.51.100.3", 429}} {
			if r := s.widget(t, pk, "ok@good.example", want.client); r.status != want.status {
				t.Fatalf("call %d from %s: %d %s, want %d", i+1, want.client, r.status, r.body, want.status)
			}
		}
	})
}

// TestWidgetFloodNeverThrottlesSecretKeys: a page's key at 50 calls a
// second (EVS_PUBLISHABLE_RATE=3000 a minute) from 100 client addresses,
// 200 calls, more than the account's quota (150 a day), with a call of the
// account's secret key after every tenth: the widget gets its share of the
// quota (10 %, 15) and 429 after it, and not one secret call is 429. On AWS the widget's calls are
// also metered by API Gateway on a usage key of their own (infra/evs
// TestKeysPublishableWithUsagePlan), which moto does not enforce.
func TestWidgetFloodNeverThrottlesSecretKeys(t *testing.T) {
	t.Parallel()
	forEachDeployment(t, suiteOptions{rcpt: suiteRcpt, env: map[string]string{"EVS_QUOTA_ADDRESSES": "150", "EVS_QUOTA_PERIOD": "day",
		"EVS_PUBLISHABLE_RATE": "3000", "EVS_TRUSTED_PROXIES": "127.0.0.1/32"}}, func(t *testing.T, s *suite) {
		acct, secret := s.account(t, true)
		pk := s.publishable(t, acct, evs.KeyLimits{})
		answered := 0
		for i := range 200 {
			switch r := s.widget(t, pk, fmt.Sprintf("ok-%d@good.example", i), fmt.Sprintf("198.51.100.%d", i%100)); r.status {
			case http.StatusOK:
				answered++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("widget call %d: %d %s", i+1, r.status, r.body)
			}
			if i%10 == 9 {
				r := s.do(t, secret, httpCall{method: http.MethodPost, path: "/v1/verify", body: fmt.Sprintf(`{"email":"ok-secret-%d@good.example"}`, i)})
				if r.status != http.StatusOK {
					t.Fatalf("secret call after %d widget calls: %d %s", i+1, r.status, r.body)
				}
			}
		}
		if answered != 15 {
			t.Errorf("the widget had %d calls answered, want its share, 15", answered)
		}
	})
}
