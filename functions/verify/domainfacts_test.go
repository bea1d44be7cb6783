package main_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/evs-dev/evs/internal/testkit"
)

// TestVerifyFunctionSharesDomainFacts: the verify function probes a
// domain's accept-all answer once, keeps it in the domain's item of the
// Results table, and a second instance (a cold start, empty memory) reads
// it there instead of probing again.
func TestVerifyFunctionSharesDomainFacts(t *testing.T) {
	w := newAWSWorld(t)
	_, acct := w.seedKey(t, false)
	dns := testkit.StartDNS(t)
	dns.AddRecord("corp.example. 300 IN MX 10 mx.corp.example.")
	dns.AddRecord("mx.corp.example. 300 IN A 127.0.0.1")
	var probes atomic.Int64
	smtp := testkit.StartSMTP(t, testkit.SMTPOptions{IP: "127.0.0.1", Rcpt: func(addr string) string {
		if strings.HasPrefix(strings.Trim(addr, "<>"), "evs-") {
			probes.Add(1)
			return "550 5.1.1 user unknown"
		}
		return "250 2.1.5 OK"
	}})
	bin := build(t, "verify")
	env := []string{"EVS_DNS_SERVERS=" + dns.Addr, "EVS_SMTP=direct", fmt.Sprintf("EVS_SMTP_PORT=%d", smtp.Port), "EVS_EGRESS_ALLOW=127.0.0.0/8"}
	verify := func(rt *testkit.Runtime, email string) {
		t.Helper()
		var body struct {
			Decision struct {
				Reason string `json:"reason"`
				Checks struct {
					SMTP struct {
						CatchAll string `json:"catchAll"`
					} `json:"smtp"`
				} `json:"checks"`
			} `json:"decision"`
		}
		raw := verifyOn(t, rt, acct, `{"email":"`+email+`","mode":"full"}`, 20*time.Second, &body)
		if body.Decision.Reason != "accepted_email" || body.Decision.Checks.SMTP.CatchAll != "rejected" {
			t.Fatalf("%s: %s", email, raw)
		}
	}
	first := w.start(t, bin, env...)
	verify(first, "ann@corp.example")
	verify(first, "bob@corp.example")
	out, err := testkit.DynamoDB(t).GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(w.tables.Results), Key: map[string]types.AttributeValue{
		"batchId": &types.AttributeValueMemberS{Value: "~domain#corp.example"}, "seq": &types.AttributeValueMemberN{Value: "0"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := out.Item["catchAll"].(*types.AttributeValueMemberS); v == nil || v.Value != "rejected" {
		t.Fatalf("domain item: %v", out.Item)
	}
	verify(w.start(t, bin, env...), "carl@corp.example")
	if n := probes.Load(); n != 1 {
		t.Fatalf("%d accept-all probes for one domain across two instances, want 1", n)
	}
}
