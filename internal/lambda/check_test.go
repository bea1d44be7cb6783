package lambda_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestRegion: a region must be set and, without an endpoint of its own,
// look like one; each mistake is one line naming AWS_REGION.
func TestRegion(t *testing.T) {
	local := "http://127.0.0.1:5000"
	cases := []struct {
		region   string
		endpoint *string
		ok       bool
	}{
		{"us-east-1", nil, true},
		{"us-gov-west-1", nil, true},
		{"eu-central-2", nil, true},
		{"", nil, false},
		{"us-east", nil, false},
		{"US-EAST-1", nil, false},
		{"useast1", nil, false},
		{"local", &local, true}, // a local server takes any name
		{"", &local, false},
	}
	for _, c := range cases {
		err := lambda.Region(aws.Config{Region: c.region, BaseEndpoint: c.endpoint})
		if (err == nil) != c.ok {
			t.Errorf("region %q (endpoint %v): %v", c.region, c.endpoint != nil, err)
		}
		if err != nil && (!errors.Is(err, lambda.ErrMissing) || !strings.Contains(err.Error(), "AWS_REGION") || strings.Contains(err.Error(), "\n")) {
			t.Errorf("region %q: %q; want one line that names AWS_REGION", c.region, err)
		}
	}
}

// noSuchHost fails every connection as a resolver does for a name that
// does not exist, so no test asks a real resolver.
type noSuchHost struct{}

func (noSuchHost) RoundTrip(r *http.Request) (*http.Response, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: r.URL.Hostname(), IsNotFound: true}}
}

// TestUnknownRegion: a well-formed region whose endpoint does not resolve
// (no such region) is one line naming the region and the host.
func TestUnknownRegion(t *testing.T) {
	cfg := aws.Config{
		Region:      "xx-nowhere-9",
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
		HTTPClient:  &http.Client{Transport: noSuchHost{}},
	}
	err := lambda.Check(context.Background(), cfg, lambda.Resources{Tables: []lambda.Resource{{Name: "keys", Source: "EVS_KEYS_TABLE"}}})
	if !errors.Is(err, lambda.ErrMissing) || !strings.Contains(err.Error(), `"xx-nowhere-9"`) || !strings.Contains(err.Error(), "dynamodb.xx-nowhere-9.amazonaws.com") {
		t.Fatalf("Check: %v", err)
	}
}

// TestOtherFailuresAreNotJudged: a failure that says nothing about the
// resource (here, a refused connection) does not stop the start.
func TestOtherFailuresAreNotJudged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	endpoint := "http://" + addr
	cfg := aws.Config{
		Region: "us-east-1", BaseEndpoint: &endpoint, RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
	}
	if err := lambda.Check(context.Background(), cfg, lambda.Resources{
		Tables: []lambda.Resource{{Name: "keys", Source: "EVS_KEYS_TABLE"}},
		Also: []func(context.Context, string, string) error{
			app.CheckQueue(sqs.NewFromConfig(cfg), lambda.Resource{Name: endpoint + "/000000000000/work", Source: "EVS_QUEUE_URL"}),
		},
	}); err != nil {
		t.Fatalf("Check judged a refused connection: %v", err)
	}
}

func TestMain(m *testing.M) { os.Exit(testkit.MotoMain(m)) }

// TestMissingResources: against moto, tables and a queue that exist pass;
// a missing table or queue is one line naming it, where its name came
// from, the region and the fix; a table made in another region is missing
// in this one (a wrong AWS_REGION).
func TestMissingResources(t *testing.T) {
	ctx := context.Background()
	cfg := testkit.AWSConfig(t)
	tables := dynamostore.Tables{Keys: testkit.UniqueName(t, "keys")}
	if err := dynamostore.CreateTables(ctx, testkit.DynamoDB(t), tables); err != nil {
		t.Fatal(err)
	}
	q, err := testkit.SQS(t).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(testkit.UniqueName(t, "work"))})
	if err != nil {
		t.Fatal(err)
	}
	queue := aws.ToString(q.QueueUrl)
	withQueue := func(url string) []func(context.Context, string, string) error {
		return []func(context.Context, string, string) error{
			app.CheckQueue(testkit.SQS(t), lambda.Resource{Name: url, Source: "EVS_QUEUE_URL"}),
		}
	}
	good := lambda.Resources{
		Tables: []lambda.Resource{{Name: tables.Keys, Source: "EVS_KEYS_TABLE"}},
		Also:   withQueue(queue),
	}
	if err := lambda.Check(ctx, cfg, good); err != nil {
		t.Fatalf("resources that exist: %v", err)
	}
	noTable := good
	noTable.Tables = append([]lambda.Resource{}, good.Tables...)
	noTable.Tables = append(noTable.Tables, lambda.Resource{Name: "nope", Source: "EVS_RESULTS_TABLE"})
	noQueue := good
	noQueue.Also = withQueue(queue + "-nope")
	elsewhere := cfg.Copy()
	elsewhere.Region = "eu-west-1"
	for _, c := range []struct {
		name string
		cfg  aws.Config
		r    lambda.Resources
		want []string
	}{
		{"missing table", cfg, noTable, []string{`DynamoDB table "nope" (EVS_RESULTS_TABLE) does not exist in region us-east-1`, "sam deploy"}},
		{"missing queue", cfg, noQueue, []string{"SQS queue " + queue + "-nope (EVS_QUEUE_URL) does not exist", "sam deploy"}},
		{"other region", elsewhere, good, []string{`DynamoDB table "` + tables.Keys + `" (EVS_KEYS_TABLE) does not exist in region eu-west-1`, "AWS_REGION"}},
	} {
		err := lambda.Check(ctx, c.cfg, c.r)
		if !errors.Is(err, lambda.ErrMissing) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v; want one line", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
	}
}
