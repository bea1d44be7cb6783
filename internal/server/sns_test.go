package server_test

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/webhook"
)

const snsTopic = "arn:aws:sns:us-west-2:123456789012:MyTopic"

// sesBounce is AWS's sample Permanent bounce (internal/api/testdata/ses)
// for addr, at at.
func sesBounce(t *testing.T, addr, at string) string {
	t.Helper()
	b, err := os.ReadFile("../api/testdata/ses/bounce-permanent.json")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), "jane@example.com", addr)
	return strings.ReplaceAll(s, "2016-01-27T14:59:38.237Z", at)
}

// startSNS starts a harness whose SNS endpoint trusts the loopback
// stand-in's CA and host, and returns it with the live account's SNS URL
// path.
func startSNS(t *testing.T, sns *testkit.SNS, topics ...string) (*harness, string) {
	t.Helper()
	return startSNSWith(t, sns, func(*server.Options) {}, topics...)
}

// startSNSWith is startSNS with more options set by more.
func startSNSWith(t *testing.T, sns *testkit.SNS, more func(*server.Options), topics ...string) (*harness, string) {
	t.Helper()
	h := start(t, options{rcpt: catchAll, server: func(o *server.Options) {
		more(o)
		o.Config.CacheTTL = 24 * time.Hour
		o.SNS = server.SNSOptions{
			Verifier: api.NewSNSVerifier(api.HTTPCertFetcher{Client: sns.Client}, func(host string) bool { return host == sns.Host }, sns.Roots, nil),
			Confirm:  api.HTTPConfirm(sns.Client),
			Topics:   topics,
		}
	}})
	sec, err := webhook.Secret(context.Background(), h.st, h.liveAcct)
	if err != nil {
		t.Fatal(err)
	}
	return h, "/v1/outcomes/sns?account=" + url.QueryEscape(h.liveAcct) + "&token=" + url.QueryEscape(api.SNSToken(sec.Current, h.liveAcct))
}

func (h *harness) postSNS(path string, body []byte) reply {
	h.t.Helper()
	return h.do(req{method: "POST", path: path, body: string(body), headers: map[string]string{"Content-Type": "text/plain; charset=UTF-8"}})
}

// TestSNSOutcomes (contract, section 18): a signed SES Bounce notification
// posted to the account's SNS URL makes the next verdict of the address
// known_bounce, even reused from the cache; SNS's retry is a duplicate; a
// wrong token, another account's, a tampered message and a message from
// a topic not allowed are refused and store nothing; a subscription is
// confirmed at its (loopback) SNS host, and one pointing elsewhere is not
// visited.
func TestSNSOutcomes(t *testing.T) {
	t.Parallel()
	sns := testkit.StartSNS(t, testkit.SNSOptions{})
	h, path := startSNS(t, sns)
	if status, d := h.verifyDecision(h.liveKey, "bob@good.example"); status != "risky" || history(d) != nil {
		t.Fatalf("before: %s %v", status, history(d))
	}
	note := sns.Sign(testkit.SNSMessageFields{TopicArn: snsTopic, Message: sesBounce(t, "bob@good.example", "2026-11-22T09:59:00.000Z")})
	r := h.postSNS(path, note)
	if m := r.json(t); r.status != 200 || m["type"] != "Notification" || m["received"] != 1.0 || m["accepted"] != 1.0 {
		t.Fatalf("notification: %d %s", r.status, r.body)
	}
	status, d := h.verifyDecision(h.liveKey, "bob@good.example")
	if status != "undeliverable" || d["reason"] != "known_bounce" || d["cached"] != true {
		t.Fatalf("after the bounce: %s/%v cached %v", status, d["reason"], d["cached"])
	}
	if hist := history(d); hist["at"] != "2026-11-22T09:59:00.000Z" || hist["bounceType"] != "hard" ||
		hist["smtpReply"] != "550 5.1.1 <bob@good.example>... User" {
		t.Errorf("evidence: %v", hist)
	}
	if r := h.postSNS(path, note); r.status != 200 || r.json(t)["duplicates"] != 1.0 || r.json(t)["accepted"] != 0.0 {
		t.Errorf("SNS's retry: %d %s", r.status, r.body)
	}

	// Refused, and nothing stored: carol stays as the checks found her.
	otherAcct, otherKey := h.account("other", false)
	otherSec, err := webhook.Secret(context.Background(), h.st, otherAcct)
	if err != nil {
		t.Fatal(err)
	}
	carol := sns.Sign(testkit.SNSMessageFields{TopicArn: snsTopic, MessageID: "c0ffee", Message: sesBounce(t, "carol@good.example", "2026-11-22T09:59:00.000Z")})
	q, _ := url.ParseQuery(strings.SplitN(path, "?", 2)[1])
	base := "/v1/outcomes/sns?account=" + url.QueryEscape(q.Get("account"))
	for _, tc := range []struct {
		name, path string
		body       []byte
		status     int
		code       string
	}{
		{"no token", base, carol, 401, "unauthorized"},
		{"wrong token", base + "&token=snst_AAAA", carol, 401, "unauthorized"},
		{"another account's token", base + "&token=" + url.QueryEscape(api.SNSToken(otherSec.Current, otherAcct)), carol, 401, "unauthorized"},
		{"unknown account", "/v1/outcomes/sns?account=nobody&token=" + q.Get("token"), carol, 401, "unauthorized"},
		{"tampered message", path, bytes.Replace(carol, []byte("Permanent"), []byte("Transient"), 1), 403, "forbidden"},
		{"signed by another CA", path, testkit.StartSNS(t, testkit.SNSOptions{}).Sign(testkit.SNSMessageFields{TopicArn: snsTopic,
			Message: sesBounce(t, "carol@good.example", "2026-11-22T09:59:00.000Z"), CertURL: sns.CertURL}), 403, "forbidden"},
		{"not JSON", path, []byte("hello"), 400, "invalid_request"},
	} {
		r := h.postSNS(tc.path, tc.body)
		if r.status != tc.status || r.errorCode(t) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, r.status, r.body, tc.status, tc.code)
		}
	}
	for _, key := range []string{h.liveKey, otherKey} {
		if status, d := h.verifyDecision(key, "carol@good.example"); status == "undeliverable" || history(d) != nil {
			t.Errorf("a refused message was stored: %s %v", status, history(d))
		}
	}
	if r := h.do(req{method: "GET", path: path}); r.status != 405 {
		t.Errorf("GET: %d", r.status)
	}

	// Subscription confirmation: visited at the SNS host, once verified.
	confirm := testkit.SNSMessageFields{Type: "SubscriptionConfirmation", MessageID: "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
		Token: "2336412f37", TopicArn: snsTopic, Timestamp: "2012-04-26T20:45:04.751Z",
		Message:      "You have chosen to subscribe to the topic " + snsTopic + ".\nTo confirm the subscription, visit the SubscribeURL included in this message.",
		SubscribeURL: sns.SubscribeURL(snsTopic, "2336412f37")}
	if r := h.postSNS(path, sns.Sign(confirm)); r.status != 200 || r.json(t)["confirmed"] != true {
		t.Fatalf("confirmation: %d %s", r.status, r.body)
	}
	if got := sns.Confirmed(); len(got) != 1 || got[0] != "2336412f37" {
		t.Errorf("confirmed tokens: %v", got)
	}
	elsewhere := confirm
	elsewhere.SubscribeURL = "https://127.0.0.2:1/?Action=ConfirmSubscription&Token=x"
	if r := h.postSNS(path, sns.Sign(elsewhere)); r.status != 403 {
		t.Errorf("a SubscribeURL off the SNS host: %d %s", r.status, r.body)
	}
	tampered := bytes.Replace(sns.Sign(confirm), []byte("Token=2336412f37"), []byte("Token=2336412f38"), 1)
	if r := h.postSNS(path, tampered); r.status != 403 {
		t.Errorf("a tampered confirmation: %d %s", r.status, r.body)
	}
	if got := sns.Confirmed(); len(got) != 1 {
		t.Errorf("a refused confirmation was visited: %v", got)
	}

	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, "@good.example") || strings.Contains(line, q.Get("token")) {
			t.Errorf("a log line holds an address or the token: %s", line)
		}
	}

	// With an allow-list of topics, another topic is refused.
	h2, path2 := startSNS(t, sns, "arn:aws:sns:us-west-2:123456789012:Other")
	if r := h2.postSNS(path2, note); r.status != 403 || r.errorCode(t) != "forbidden" {
		t.Errorf("a topic not allowed: %d %s", r.status, r.body)
	}
}

// TestSNSOutcomesCapped: outcomes from SES notifications count against
// the account's outcomes cap as posted ones do: past it, 429 and nothing
// of the notification kept.
func TestSNSOutcomesCapped(t *testing.T) {
	t.Parallel()
	sns := testkit.StartSNS(t, testkit.SNSOptions{})
	h, path := startSNSWith(t, sns, func(o *server.Options) { o.Config.MaxOutcomes = 1 })
	bounce := func(addr, id string) []byte {
		return sns.Sign(testkit.SNSMessageFields{TopicArn: snsTopic, MessageID: id, Message: sesBounce(t, addr, "2026-11-22T09:59:00.000Z")})
	}
	if r := h.postSNS(path, bounce("bob@good.example", "b0b")); r.status != 200 || r.json(t)["accepted"] != 1.0 {
		t.Fatalf("first notification: %d %s", r.status, r.body)
	}
	r := h.postSNS(path, bounce("carol@good.example", "ca201"))
	if r.status != 429 || r.errorCode(t) != "rate_limited" || !strings.Contains(string(r.body), "outcomes cap") {
		t.Fatalf("past the cap: %d %s", r.status, r.body)
	}
	if status, d := h.verifyDecision(h.liveKey, "carol@good.example"); status == "undeliverable" || history(d) != nil {
		t.Errorf("an outcome past the cap was kept: %s %v", status, history(d))
	}
}

// TestSNSTokenRotation: the token rotates with the account's webhook
// secret; the old one works for the secret's 24-hour overlap, then not;
// a suspended account's token is refused.
func TestSNSTokenRotation(t *testing.T) {
	sns := testkit.StartSNS(t, testkit.SNSOptions{})
	h, oldPath := startSNS(t, sns)
	ctx := context.Background()
	sec, err := webhook.Rotate(ctx, h.st, h.liveAcct, h.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	newPath := "/v1/outcomes/sns?account=" + url.QueryEscape(h.liveAcct) + "&token=" + url.QueryEscape(api.SNSToken(sec.Current, h.liveAcct))
	if newPath == oldPath {
		t.Fatal("rotation kept the token")
	}
	msg := func(id string) []byte {
		return sns.Sign(testkit.SNSMessageFields{TopicArn: snsTopic, MessageID: id, Message: sesBounce(t, id+"@good.example", "2026-11-22T09:59:00.000Z")})
	}
	for _, p := range []string{oldPath, newPath} {
		if r := h.postSNS(p, msg("a")); r.status != 200 {
			t.Errorf("within the overlap: %d %s", r.status, r.body)
		}
	}
	h.clock.Advance(25 * time.Hour)
	if r := h.postSNS(oldPath, msg("b")); r.status != 401 {
		t.Errorf("the old token after the overlap: %d %s", r.status, r.body)
	}
	if r := h.postSNS(newPath, msg("c")); r.status != 200 {
		t.Errorf("the new token: %d %s", r.status, r.body)
	}

	suspended := evs.Account{ID: "acct-suspended", Name: "suspended", Suspended: true, CreatedAt: h.clock.Now()}
	if err := h.st.CreateAccount(ctx, suspended); err != nil {
		t.Fatal(err)
	}
	ss, err := webhook.Secret(ctx, h.st, suspended.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r := h.postSNS("/v1/outcomes/sns?account="+suspended.ID+"&token="+url.QueryEscape(api.SNSToken(ss.Current, suspended.ID)), msg("d")); r.status != 401 {
		t.Errorf("a suspended account: %d %s", r.status, r.body)
	}
}
