package api_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/webhook"
)

const testTopic = "arn:aws:sns:us-west-2:123456789012:MyTopic"

// loopbackVerifier trusts the stand-in's CA and host, at now.
func loopbackVerifier(s *testkit.SNS, now time.Time) *api.SNSVerifier {
	return api.NewSNSVerifier(api.HTTPCertFetcher{Client: s.Client}, func(h string) bool { return h == s.Host }, s.Roots,
		func() time.Time { return now })
}

// pemOnly fetches the signing certificate and nothing else.
type pemOnly struct{ api.CertFetcher }

func (f pemOnly) FetchCert(ctx context.Context, u string) ([]byte, error) {
	if !strings.HasSuffix(u, ".pem") {
		return nil, errors.New("unreachable")
	}
	return f.CertFetcher.FetchCert(ctx, u)
}

func sesSample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "ses", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// with returns f changed by change.
func with(f testkit.SNSMessageFields, change func(*testkit.SNSMessageFields)) testkit.SNSMessageFields {
	change(&f)
	return f
}

// TestSNSSignature: messages signed as SNS signs them, in the shape of
// AWS's samples, verify (versions 1 and 2, with and without a Subject,
// notifications and confirmations); a tampered one, a wrong signature
// version, a certificate URL that is not https on an SNS host, a
// certificate not chaining to the roots, one issued to another name, and
// an expired one are refused.
func TestSNSSignature(t *testing.T) {
	now := time.Now()
	sns := testkit.StartSNS(t, testkit.SNSOptions{})
	bounce := sesSample(t, "bounce-permanent.json")
	note := testkit.SNSMessageFields{TopicArn: testTopic, Message: bounce}
	confirm := testkit.SNSMessageFields{Type: "SubscriptionConfirmation", MessageID: "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
		Token: "2336412f37", TopicArn: testTopic, Timestamp: "2012-04-26T20:45:04.751Z",
		Message:      "You have chosen to subscribe to the topic " + testTopic + ".\nTo confirm the subscription, visit the SubscribeURL included in this message.",
		SubscribeURL: sns.SubscribeURL(testTopic, "2336412f37")}
	tamper := func(b []byte, old, new string) []byte { return bytes.Replace(b, []byte(old), []byte(new), 1) }

	expired := testkit.StartSNS(t, testkit.SNSOptions{Expired: true})
	// SNS's own PEM holds the leaf alone: the intermediate comes from the
	// leaf's Authority Information Access URL.
	chained := testkit.StartSNS(t, testkit.SNSOptions{Intermediate: true})
	other := testkit.StartSNS(t, testkit.SNSOptions{OtherName: "www.example.com"})
	tests := []struct {
		name string
		v    *api.SNSVerifier
		body []byte
		ok   bool
	}{
		{"notification, version 2", loopbackVerifier(sns, now), sns.Sign(note), true},
		{"notification, version 1", loopbackVerifier(sns, now), sns.Sign(with(note, func(f *testkit.SNSMessageFields) { f.SignatureVersion = "1" })), true},
		{"with a subject", loopbackVerifier(sns, now), sns.Sign(with(note, func(f *testkit.SNSMessageFields) { f.Subject = "My First Message" })), true},
		{"with an empty subject", loopbackVerifier(sns, now), sns.Sign(with(note, func(f *testkit.SNSMessageFields) { f.HasSubject = true })), true},
		{"subscription confirmation", loopbackVerifier(sns, now), sns.Sign(confirm), true},
		{"leaf only, intermediate by AIA", loopbackVerifier(chained, now), chained.Sign(note), true},
		{"leaf only, intermediate unreachable", api.NewSNSVerifier(pemOnly{api.HTTPCertFetcher{Client: chained.Client}},
			func(h string) bool { return h == chained.Host }, chained.Roots, nil), chained.Sign(note), false},
		{"unsubscribe confirmation", loopbackVerifier(sns, now), sns.Sign(with(confirm, func(f *testkit.SNSMessageFields) { f.Type = "UnsubscribeConfirmation" })), true},

		{"tampered message", loopbackVerifier(sns, now), tamper(sns.Sign(note), `Permanent`, `Transient`), false},
		{"tampered topic", loopbackVerifier(sns, now), tamper(sns.Sign(note), testTopic, testTopic+"x"), false},
		{"subject added", loopbackVerifier(sns, now), tamper(sns.Sign(note), `"TopicArn"`, `"Subject": "", "TopicArn"`), false},
		{"tampered SubscribeURL", loopbackVerifier(sns, now), tamper(sns.Sign(confirm), "Action=ConfirmSubscription", "Action=ConfirmSubscription&x=1"), false},
		{"version 1 claimed for a version 2 signature", loopbackVerifier(sns, now), tamper(sns.Sign(note), `"SignatureVersion": "2"`, `"SignatureVersion": "1"`), false},
		{"unknown signature version", loopbackVerifier(sns, now), sns.Sign(with(note, func(f *testkit.SNSMessageFields) { f.SignatureVersion = "3" })), false},
		{"certificate over http", loopbackVerifier(sns, now), sns.Sign(with(note, func(f *testkit.SNSMessageFields) { f.CertURL = strings.Replace(sns.CertURL, "https:", "http:", 1) })), false},
		{"certificate on another host", loopbackVerifier(sns, now), sns.Sign(with(note, func(f *testkit.SNSMessageFields) { f.CertURL = other.CertURL })), false},
		{"AWS host rule: a non-AWS certificate URL", api.NewSNSVerifier(api.HTTPCertFetcher{Client: sns.Client}, api.AWSSNSHost, sns.Roots, nil), sns.Sign(note), false},
		{"certificate not chaining to the roots", api.NewSNSVerifier(api.HTTPCertFetcher{Client: sns.Client}, func(h string) bool { return h == sns.Host }, other.Roots, nil), sns.Sign(note), false},
		{"certificate issued to another name", loopbackVerifier(other, now), other.Sign(note), false},
		{"expired certificate", loopbackVerifier(expired, now), expired.Sign(note), false},
		{"message type unknown", loopbackVerifier(sns, now), sns.Sign(with(note, func(f *testkit.SNSMessageFields) { f.Type = "Other" })), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := api.ParseSNSMessage(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			err = tc.v.Verify(context.Background(), m)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && (err == nil || !errors.Is(err, api.ErrSNSSignature)) {
				t.Fatalf("verified, or not ErrSNSSignature: %v", err)
			}
		})
	}

	// A cached certificate is still checked against the clock: once it
	// expires, messages signed with it are refused.
	clock := now
	v := api.NewSNSVerifier(api.HTTPCertFetcher{Client: sns.Client}, func(h string) bool { return h == sns.Host }, sns.Roots, func() time.Time { return clock })
	m, _ := api.ParseSNSMessage(sns.Sign(note))
	if err := v.Verify(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	clock = now.AddDate(2, 0, 0)
	if err := v.Verify(context.Background(), m); err == nil {
		t.Error("a cached certificate past its NotAfter still verified")
	}
}

func TestAWSSNSHost(t *testing.T) {
	for host, want := range map[string]bool{
		"sns.us-east-1.amazonaws.com":         true,
		"sns.eu-west-3.amazonaws.com:443":     true,
		"sns.cn-north-1.amazonaws.com.cn":     true,
		"sns.cn-northwest-1.amazonaws.com.cn": true,
		"sns.us-gov-west-1.amazonaws.com":     true,
		"sns.eusc-de-east-1.amazonaws.com":    true,
		// S3's hosts, where a bucket named "sns" is anyone's.
		"sns.s3-us-west-2.amazonaws.com":         false,
		"sns.s3-external-1.amazonaws.com":        false,
		"sns.s3.us-east-1.amazonaws.com":         false,
		"sns.s3-website-us-east-1.amazonaws.com": false,
		"sns.us-east-1.amazonaws.com.cn":         false,
		"sns.us-east.amazonaws.com":              false,
		"sns.us-east-1.amazonaws.com:8443":       false,
		"sns.us-east-1.amazonaws.com.evil.x":     false,
		"evil.sns.us-east-1.amazonaws.com":       false,
		"sns.amazonaws.com":                      false,
		"sqs.us-east-1.amazonaws.com":            false,
		"127.0.0.1":                              false,
	} {
		if got := api.AWSSNSHost(host); got != want {
			t.Errorf("AWSSNSHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// recordingFetcher counts the fetches it is asked for.
type recordingFetcher struct {
	api.CertFetcher
	urls []string
}

func (f *recordingFetcher) FetchCert(ctx context.Context, u string) ([]byte, error) {
	f.urls = append(f.urls, u)
	return f.CertFetcher.FetchCert(ctx, u)
}

// TestSNSCertificateFetch: with AWS's host rule, a certificate on an S3
// host is refused before any fetch; a certificate at
// sns.us-east-1.amazonaws.com that resolves to loopback is fetched by the
// production client (webhook.NewClient) only when the egress policy
// allows loopback, so the refusal is the dialler's, not the TLS's.
func TestSNSCertificateFetch(t *testing.T) {
	sns := testkit.StartSNS(t, testkit.SNSOptions{})
	note := testkit.SNSMessageFields{TopicArn: testTopic, Message: "{}"}
	s3 := &recordingFetcher{CertFetcher: api.HTTPCertFetcher{Client: sns.Client}}
	m, _ := api.ParseSNSMessage(sns.Sign(with(note, func(f *testkit.SNSMessageFields) {
		f.CertURL = "https://sns.s3-us-west-2.amazonaws.com/SimpleNotificationService-x.pem"
	})))
	if err := api.NewSNSVerifier(s3, api.AWSSNSHost, sns.Roots, nil).Verify(context.Background(), m); !errors.Is(err, api.ErrSNSSignature) || len(s3.urls) != 0 {
		t.Fatalf("S3-hosted certificate: %v, fetched %v; want refused with no fetch", err, s3.urls)
	}

	// The test's resolver: every name is the stand-in's loopback address.
	resolveToStandIn := func(c *http.Client) *http.Client {
		tr := c.Transport.(*http.Transport)
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) { return dial(ctx, network, sns.Host) }
		// The stand-in's TLS certificate names example.com.
		tr.TLSClientConfig = &tls.Config{RootCAs: sns.Client.Transport.(*http.Transport).TLSClientConfig.RootCAs, ServerName: "example.com"}
		return c
	}
	m, _ = api.ParseSNSMessage(sns.Sign(with(note, func(f *testkit.SNSMessageFields) {
		f.CertURL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem"
	})))
	loopback, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pol  *config.EgressPolicy
		ok   bool
	}{{"without EVS_EGRESS_ALLOW", nil, false}, {"with loopback allowed", loopback, true}} {
		v := api.NewSNSVerifier(api.HTTPCertFetcher{Client: resolveToStandIn(webhook.NewClient(tc.pol))}, api.AWSSNSHost, sns.Roots, nil)
		err := v.Verify(context.Background(), m)
		if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, config.ErrEgressRefused) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestSESOutcomes: AWS's sample notifications become the outcomes the
// contract stores.
func TestSESOutcomes(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	at := func(s string) time.Time { tm, _ := time.Parse(time.RFC3339, s); return tm }
	tests := []struct {
		file string
		want []evs.Outcome
	}{
		{"bounce-permanent.json", []evs.Outcome{{Address: "jane@example.com", Kind: evs.OutcomeBounced, BounceType: evs.BounceHard,
			At: at("2016-01-27T14:59:38.237Z"), SMTPReply: "550 5.1.1 <jane@example.com>... User"}}},
		{"bounce-no-dsn.json", []evs.Outcome{
			{Address: "jane@example.com", Kind: evs.OutcomeBounced, BounceType: evs.BounceHard, At: at("2016-01-27T14:59:38.237Z")},
			{Address: "richard@example.com", Kind: evs.OutcomeBounced, BounceType: evs.BounceHard, At: at("2016-01-27T14:59:38.237Z")}}},
		{"bounce-transient.json", []evs.Outcome{{Address: "jane@example.com", Kind: evs.OutcomeBounced, BounceType: evs.BounceSoft,
			At: at("2016-01-27T14:59:38.237Z"), SMTPReply: "452 4.2.2 Mailbox full"}}},
		{"bounce-undetermined.json", []evs.Outcome{
			{Address: "jane@example.com", Kind: evs.OutcomeBounced, At: at("2016-01-27T14:59:38.237Z")},
			{Address: "richard@example.com", Kind: evs.OutcomeBounced, At: at("2016-01-27T14:59:38.237Z")}}},
		{"delivery.json", []evs.Outcome{{Address: "jane@example.com", Kind: evs.OutcomeDelivered,
			At: at("2016-01-27T14:59:38.237Z"), SMTPReply: "250 ok:  Message 64111812 accepted"}}},
		{"complaint.json", []evs.Outcome{{Address: "richard@example.com", Kind: evs.OutcomeComplained, At: at("2016-01-27T14:59:38.237Z")}}},
		{"event-bounce.json", []evs.Outcome{{Address: "recipient@example.com", Kind: evs.OutcomeBounced, BounceType: evs.BounceHard,
			At: at("2017-08-05T00:41:02.669Z"), SMTPReply: "550 5.1.1 user unknown"}}},
		{"event-delivery-delay.json", []evs.Outcome{{Address: "recipient@example.com", Kind: evs.OutcomeDeferred,
			At: at("2020-06-16T00:25:40.095Z"), SMTPReply: "421 4.4.1 Unable to connect to remote host"}}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			got, skipped, err := api.SESOutcomes([]byte(sesSample(t, tc.file)), now)
			if err != nil || skipped != 0 {
				t.Fatalf("err %v, skipped %d", err, skipped)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if g, w := got[i], tc.want[i]; g.Address != w.Address || g.Kind != w.Kind || g.BounceType != w.BounceType ||
					!g.At.Equal(w.At) || g.SMTPReply != w.SMTPReply {
					t.Errorf("[%d] = %+v, want %+v", i, g, w)
				}
			}
		})
	}
	// Other event types give nothing; a recipient with a bad address is
	// left out, not the notification.
	if got, _, err := api.SESOutcomes([]byte(`{"eventType":"Open","mail":{"destination":["a@b.example"]},"open":{}}`), now); err != nil || len(got) != 0 {
		t.Errorf("Open: %v %v", got, err)
	}
	got, skipped, err := api.SESOutcomes([]byte(`{"notificationType":"Delivery","mail":{"timestamp":"2026-11-20T10:00:00Z"},
		"delivery":{"recipients":["not an address","ok@good.example"]}}`), now)
	if err != nil || skipped != 1 || len(got) != 1 || got[0].Address != "ok@good.example" || !got[0].At.Equal(at("2026-11-20T10:00:00Z")) {
		t.Errorf("bad recipient: %v skipped %d err %v", got, skipped, err)
	}
	if _, _, err := api.SESOutcomes([]byte(`{"notificationType":"Bounce"}`), now); err == nil {
		t.Error("a Bounce without its object was accepted")
	}
}

// FuzzSESOutcomes: no notification makes the parser panic, and what it
// returns is what POST /v1/outcomes would store.
func FuzzSESOutcomes(f *testing.F) {
	for _, name := range []string{"bounce-permanent.json", "bounce-no-dsn.json", "complaint.json", "delivery.json", "event-delivery-delay.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "ses", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"notificationType":"Bounce","bounce":{"bounceType":"Permanent","bouncedRecipients":[{"emailAddress":"a@b.example","diagnosticCode":"smtp;\u0000\ufffd"}]}}`))
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, b []byte) {
		os, _, err := api.SESOutcomes(b, now)
		if err != nil {
			return
		}
		for _, o := range os {
			if o.Address == "" || o.At.IsZero() || o.At.After(now.Add(time.Hour)) || !utf8.ValidString(o.SMTPReply) ||
				strings.ContainsRune(o.SMTPReply, 0) || utf8.RuneCountInString(o.SMTPReply) > 200 {
				t.Fatalf("bad outcome %+v", o)
			}
			if o.BounceType != "" && o.Kind != evs.OutcomeBounced {
				t.Fatalf("bounce type on %s", o.Kind)
			}
		}
	})
}

// noFetch refuses every certificate fetch.
type noFetch struct{}

func (noFetch) FetchCert(context.Context, string) ([]byte, error) { return nil, errors.New("offline") }

// FuzzSNSMessage: no body makes the SNS parser or the verifier panic, and
// nothing verifies without a certificate.
func FuzzSNSMessage(f *testing.F) {
	f.Add([]byte(`{"Type":"Notification","MessageId":"22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324","TopicArn":"arn:aws:sns:us-west-2:123456789012:MyTopic","Subject":"My First Message","Message":"Hello world!","Timestamp":"2012-05-02T00:54:06.655Z","SignatureVersion":"1","Signature":"RVhBTVBMRQ==","SigningCertURL":"https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem"}`))
	f.Add([]byte(`{"Type":"SubscriptionConfirmation","Token":"x","SubscribeURL":"https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription","SignatureVersion":"2","Signature":"AA==","SigningCertURL":"https://sns.us-west-2.amazonaws.com/x.pem"}`))
	v := api.NewSNSVerifier(noFetch{}, api.AWSSNSHost, nil, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := api.ParseSNSMessage(b)
		if err != nil {
			return
		}
		_, _ = m.StringToSign()
		if err := v.Verify(context.Background(), m); err == nil {
			t.Fatal("verified without a certificate")
		}
	})
}
