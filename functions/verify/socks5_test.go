package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/evs-dev/evs/internal/testkit"
)

// TestLambdaSMTPThroughSOCKS5 runs the real verify, requests and worker
// binaries for a live (non-test) account with the SOCKS5 exit configured as
// on AWS (EVS_SMTP_PROXY_SECRET naming a Secrets Manager secret, on moto,
// whose value is the proxy's URL with a user name and password as in
// production, so SMTP mode is proxy; the test proxy does not ask for them):
// the verdicts come from a loopback mail server reached through a real
// SOCKS5 server (danted), and every connection that server saw came from
// the proxy's external address.
// A probe that bypassed the proxy would come from 127.0.0.1 and fail it.
func TestLambdaSMTPThroughSOCKS5(t *testing.T) {
	proxy := testkit.SOCKS5(t)
	mx := testkit.StartSMTP(t, testkit.SMTPOptions{IP: "127.0.0.2", Rcpt: func(addr string) string {
		if strings.HasPrefix(addr, "alice@") || strings.HasPrefix(addr, "bob@") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown"
	}})
	dns := testkit.StartDNS(t)
	dns.AddRecord("corp.example. 300 IN MX 10 mx.corp.example.")
	dns.AddRecord("mx.corp.example. 300 IN A 127.0.0.2")
	w := newAWSWorld(t)
	sec, err := testkit.SecretsManager(t).CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{
		Name: aws.String(testkit.UniqueName(t, "proxy")), SecretString: aws.String(strings.Replace(proxy.URL, "socks5://", "socks5://evs:pa55word@", 1)),
	})
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		"EVS_SMTP_PROXY_SECRET=" + aws.ToString(sec.ARN),
		"EVS_DNS_SERVERS=" + dns.Addr,
		"EVS_SMTP_PORT=" + fmt.Sprint(mx.Port),
		"EVS_EGRESS_ALLOW=127.0.0.0/8",
	}
	_, acct := w.seedKey(t, false)

	t.Run("verify", func(t *testing.T) {
		rt := w.start(t, build(t, "verify"), env...)
		for _, c := range []struct{ email, status, reason, smtp string }{
			{"alice@corp.example", "deliverable", "accepted_email", "accepted"},
			{"nobody@corp.example", "undeliverable", "rejected_email", "rejected"},
		} {
			var body struct {
				Status   string `json:"status"`
				Decision struct {
					Reason   string `json:"reason"`
					TestMode bool   `json:"testMode"`
					Checks   struct {
						SMTP struct {
							Result string `json:"result"`
							Host   string `json:"host"`
						} `json:"smtp"`
					} `json:"checks"`
				} `json:"decision"`
			}
			raw := verifyOn(t, rt, acct, `{"email":"`+c.email+`"}`, 30*time.Second, &body)
			d := body.Decision
			if body.Status != c.status || d.Reason != c.reason || d.TestMode || d.Checks.SMTP.Result != c.smtp || d.Checks.SMTP.Host != "mx.corp.example" {
				t.Errorf("%s: %s", c.email, raw)
			}
		}
	})

	t.Run("batch through SQS", func(t *testing.T) {
		requests := w.start(t, build(t, "requests"), env...)
		worker := w.start(t, build(t, "worker"), env...)
		emails := []string{"alice@corp.example", "nobody@corp.example", "bob@corp.example"}
		b, _ := json.Marshal(map[string]any{"emails": emails, "mode": "full"})
		out, err := requests.Invoke(proxyEvent("POST", "/v1/requests", "/v1/requests", nil, acct, string(b)), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayProxyResponse
		if err := json.Unmarshal(out.Response, &resp); err != nil || resp.StatusCode != 201 {
			t.Fatalf("create: %s %s", out.Response, out.Error)
		}
		var created struct {
			Request struct{ ID string } `json:"request"`
		}
		if err := json.Unmarshal([]byte(resp.Body), &created); err != nil || created.Request.ID == "" {
			t.Fatalf("create: %s", resp.Body)
		}
		id := created.Request.ID
		feedWorker(t, w, worker, acct.ID, id, false)

		out, err = requests.Invoke(proxyEvent("GET", "/v1/requests/{id}/results", "/v1/requests/"+id+"/results", map[string]string{"id": id}, acct, ""), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		resp = events.APIGatewayProxyResponse{}
		if err := json.Unmarshal(out.Response, &resp); err != nil || resp.StatusCode != 200 {
			t.Fatalf("results: %s %s", out.Response, out.Error)
		}
		var page struct {
			Results []struct {
				Email    string `json:"email"`
				Status   string `json:"status"`
				Decision struct {
					Reason   string `json:"reason"`
					TestMode bool   `json:"testMode"`
					Checks   struct {
						SMTP struct {
							Result string `json:"result"`
						} `json:"smtp"`
					} `json:"checks"`
				} `json:"decision"`
			} `json:"results"`
		}
		if err := json.Unmarshal([]byte(resp.Body), &page); err != nil {
			t.Fatal(err)
		}
		want := []string{"alice@corp.example deliverable accepted_email accepted", "nobody@corp.example undeliverable rejected_email rejected", "bob@corp.example deliverable accepted_email accepted"}
		var got []string
		for _, r := range page.Results {
			if r.Decision.TestMode {
				t.Errorf("%s: a live account's result is marked testMode", r.Email)
			}
			got = append(got, strings.Join([]string{r.Email, r.Status, r.Decision.Reason, r.Decision.Checks.SMTP.Result}, " "))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("results:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	clients := mx.Clients()
	if len(clients) == 0 {
		t.Fatal("the mail server got no connection")
	}
	for _, from := range clients {
		if from != proxy.External {
			t.Errorf("the mail server got a connection from %s, not through the proxy (%s)", from, proxy.External)
		}
	}
}

// feedWorker hands the queue's messages to the worker as the SQS event source
// mapping does, until the batch is final in the store. An empty receive does
// not end it (a busy machine can leave the next message a moment away);
// only the batch's state does. With redeliverFirst the first messages are
// delivered twice: redelivery must not count twice.
func feedWorker(t *testing.T, w *awsWorld, worker *testkit.Runtime, accountID, batchID string, redeliverFirst bool) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	for delivered := 0; time.Now().Before(deadline); {
		if b, err := w.st.Batch(ctx, accountID, batchID); err != nil {
			t.Fatal(err)
		} else if b.State.Final() {
			return
		}
		msgs, err := w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs.Messages) == 0 {
			continue
		}
		ev := events.SQSEvent{}
		for _, m := range msgs.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body), EventSource: "aws:sqs"})
		}
		times := 1
		if redeliverFirst && delivered == 0 {
			times = 2
		}
		for range times {
			out, err := worker.Invoke(ev, 60*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var r events.SQSEventResponse
			if err := json.Unmarshal(out.Response, &r); err != nil || len(r.BatchItemFailures) > 0 {
				t.Fatalf("worker: %s %s", out.Response, out.Error)
			}
		}
		delivered++
		for _, m := range msgs.Messages {
			_, _ = w.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.queueURL), ReceiptHandle: m.ReceiptHandle})
		}
	}
	t.Fatal("the batch was not final after 90 s of feeding the worker")
}
