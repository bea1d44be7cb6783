package main_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// TestLambdaOutcomes (contract, section 18) runs the real requests and
// verify binaries on DynamoDB in moto: outcomes POSTed to the requests
// function change what the verify function answers, and the report and
// DELETE work there as on `evs serve`.
func TestLambdaOutcomes(t *testing.T) {
	w := newAWSWorld(t)
	_, acct := w.seedKey(t, true)
	requests := w.start(t, build(t, "requests"))
	verifier := w.start(t, build(t, "verify"))
	invoke := func(ev events.APIGatewayProxyRequest, verify bool) (int, map[string]any) {
		t.Helper()
		rt := requests
		if verify {
			rt = verifier
		}
		out, err := rt.Invoke(ev, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayProxyResponse
		if err := json.Unmarshal(out.Response, &resp); err != nil {
			t.Fatalf("reply %s / error %s", out.Response, out.Error)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(resp.Body), &m); err != nil {
			t.Fatalf("%d %s", resp.StatusCode, resp.Body)
		}
		return resp.StatusCode, m
	}
	verify := func(email string) map[string]any {
		t.Helper()
		code, m := invoke(proxyEvent("POST", "/v1/verify", "/v1/verify", nil, acct, `{"email":"`+email+`"}`), true)
		if code != 200 {
			t.Fatalf("verify: %d %v", code, m)
		}
		return m["decision"].(map[string]any)
	}
	if d := verify("team+accept-all@x.example"); d["reason"] != "accept_all" {
		t.Fatalf("before outcomes: %v", d["reason"])
	}
	code, m := invoke(proxyEvent("POST", "/v1/outcomes", "/v1/outcomes", nil, acct, `{"outcomes":[
		{"email":"team+accept-all@x.example","outcome":"bounced","bounceType":"hard","at":"2026-01-02T03:04:05Z","smtpReply":"550 5.1.1 gone"},
		{"email":"other+accept-all@x.example","outcome":"delivered","at":"2026-01-02T03:04:05Z"}]}`), false)
	if code != 200 || m["accepted"] != 2.0 {
		t.Fatalf("post outcomes: %d %v", code, m)
	}
	d := verify("team+accept-all@x.example")
	h, _ := d["checks"].(map[string]any)["history"].(map[string]any)
	if d["reason"] != "known_bounce" || h["result"] != "known_bounce" || h["smtpReply"] != "550 5.1.1 gone" {
		t.Errorf("after a hard bounce: %v %v", d["reason"], h)
	}
	if d := verify("other+accept-all@x.example"); d["reason"] != "accepted_email" || d["score"] != 95.0 {
		t.Errorf("after a delivery: %v %v", d["reason"], d["score"])
	}
	code, m = invoke(proxyEvent("GET", "/v1/outcomes/report", "/v1/outcomes/report", nil, acct, ""), false)
	if code != 200 || m["outcomes"] != 2.0 {
		t.Errorf("report: %d %v", code, m)
	}
	ev := proxyEvent("DELETE", "/v1/outcomes", "/v1/outcomes", nil, acct, "")
	ev.QueryStringParameters = map[string]string{"email": "team+accept-all@x.example"}
	if code, m := invoke(ev, false); code != 200 || m["deleted"] != 1.0 {
		t.Errorf("delete: %d %v", code, m)
	}
	if d := verify("team+accept-all@x.example"); d["reason"] != "accept_all" {
		t.Errorf("after delete: %v", d["reason"])
	}
}
