// Command samlocal prepares a local AWS-API server (moto_server) for
// `sam local start-api` (make sam-local): it creates the DynamoDB tables and
// the SQS work queue that infra/sam/env.json names, with the key schemas of
// template.yaml (dynamostore.CreateTables; a test holds them equal), and an
// API Gateway usage plan for `evs keys create --usage-plan`. It is
// idempotent: what exists is kept.
//
//	samlocal --env-vars infra/sam/env.json --endpoint http://127.0.0.1:5000
//
// It prints, for the shell to eval, EVS_KEYS_TABLE=... and
// EVS_USAGE_PLAN_ID=...
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/evs-dev/evs/internal/dynamostore"
)

// usagePlanName names the local usage plan; it is looked up by this name,
// so running samlocal again finds it.
const usagePlanName = "evs-local"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "samlocal:", err)
		stop()
		os.Exit(1)
	}
}

// resources are what the functions of env.json are pointed at; every
// function must name the same ones.
type resources struct {
	Tables   dynamostore.Tables
	QueueURL string
}

// readEnvVars reads a `sam local --env-vars` file: function logical id →
// variable → value.
func readEnvVars(file string) (map[string]map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var vars map[string]map[string]string
	if err := json.Unmarshal(b, &vars); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return vars, nil
}

// resourcesOf returns the tables and queue the functions of vars use, or an
// error when functions disagree or a name is missing.
func resourcesOf(vars map[string]map[string]string) (resources, error) {
	var (
		r     resources
		first string
	)
	fns := make([]string, 0, len(vars))
	for fn := range vars {
		fns = append(fns, fn)
	}
	slices.Sort(fns)
	for _, fn := range fns {
		v := vars[fn]
		got := resources{
			Tables: dynamostore.Tables{
				Keys: v["EVS_KEYS_TABLE"], Batches: v["EVS_BATCHES_TABLE"],
				Results: v["EVS_RESULTS_TABLE"], Idempotency: v["EVS_IDEMPOTENCY_TABLE"],
			},
			QueueURL: v["EVS_QUEUE_URL"],
		}
		if first == "" {
			r, first = got, fn
			continue
		}
		if got != r {
			return resources{}, fmt.Errorf("%s and %s name different tables or queues", first, fn)
		}
	}
	t := r.Tables
	if t.Keys == "" || t.Batches == "" || t.Results == "" || t.Idempotency == "" || r.QueueURL == "" {
		return resources{}, errors.New("every function needs EVS_KEYS_TABLE, EVS_BATCHES_TABLE, EVS_RESULTS_TABLE, EVS_IDEMPOTENCY_TABLE and EVS_QUEUE_URL")
	}
	return r, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("samlocal", flag.ContinueOnError)
	envFile := fs.String("env-vars", "infra/sam/env.json", "the `sam local --env-vars` file")
	endpoint := fs.String("endpoint", "http://127.0.0.1:5000", "the local AWS-API server, as this host reaches it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if u, err := url.Parse(*endpoint); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("--endpoint %q is not an http:// URL", *endpoint)
	}
	vars, err := readEnvVars(*envFile)
	if err != nil {
		return err
	}
	res, err := resourcesOf(vars)
	if err != nil {
		return fmt.Errorf("%s: %w", *envFile, err)
	}
	// A local server accepts any credentials; fixed ones keep the tool
	// from reaching for a real AWS profile. The region is the one
	// `make sam-local` gives `sam local start-api`.
	cfg := aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		BaseEndpoint: aws.String(strings.TrimRight(*endpoint, "/")),
	}
	plan, err := setup(ctx, cfg, res)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "EVS_KEYS_TABLE=%s\nEVS_USAGE_PLAN_ID=%s\n", res.Tables.Keys, plan)
	return nil
}

// setup creates the tables, the queue and the usage plan on the server of
// cfg and returns the usage plan's id.
func setup(ctx context.Context, cfg aws.Config, res resources) (string, error) {
	if err := dynamostore.CreateTables(ctx, dynamodb.NewFromConfig(cfg), res.Tables); err != nil {
		return "", err
	}
	u, err := url.Parse(res.QueueURL)
	if err != nil || path.Base(u.Path) == "" {
		return "", fmt.Errorf("EVS_QUEUE_URL %q does not end in a queue name", res.QueueURL)
	}
	// The functions send to the URL in env.json, whose host is how the
	// containers reach the server; the server finds the queue by the
	// account and name in its path, which must match what it creates.
	q, err := sqs.NewFromConfig(cfg).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(path.Base(u.Path))})
	if err != nil {
		return "", fmt.Errorf("create queue: %w", err)
	}
	if got, err := url.Parse(aws.ToString(q.QueueUrl)); err != nil || got.Path != u.Path {
		return "", fmt.Errorf("the server made queue %s, which does not have the path of EVS_QUEUE_URL %s", aws.ToString(q.QueueUrl), res.QueueURL)
	}
	gw := apigateway.NewFromConfig(cfg)
	plans, err := gw.GetUsagePlans(ctx, &apigateway.GetUsagePlansInput{})
	if err != nil {
		return "", fmt.Errorf("list usage plans: %w", err)
	}
	for _, p := range plans.Items {
		if aws.ToString(p.Name) == usagePlanName {
			return aws.ToString(p.Id), nil
		}
	}
	p, err := gw.CreateUsagePlan(ctx, &apigateway.CreateUsagePlanInput{
		Name:        aws.String(usagePlanName),
		Description: aws.String("make sam-local: keys made with evs keys create --usage-plan"),
	})
	if err != nil {
		return "", fmt.Errorf("create usage plan: %w", err)
	}
	return aws.ToString(p.Id), nil
}
