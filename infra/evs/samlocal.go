package main

// `evs sam-local-init` is the step of make sam-local that readies
// moto_server for `sam local start-api`: the tables (dynamostore.CreateTables)
// and the usage plan `evs keys create --usage-plan` puts the local key in.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/apigateway"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/spf13/cobra"

	"github.com/evs-dev/evs/internal/dynamostore"
)

// localUsagePlanName names the local usage plan; it is looked up by this
// name, so running sam-local-init again finds it.
const localUsagePlanName = "evs-local"

// samResources are what the functions of env.json are pointed at; every
// function must name the same ones.
type samResources struct {
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
func resourcesOf(vars map[string]map[string]string) (samResources, error) {
	var (
		r     samResources
		first string
	)
	for _, fn := range slices.Sorted(maps.Keys(vars)) {
		v := vars[fn]
		got := samResources{
			Tables: dynamostore.Tables{
				Keys: v["EVS_KEYS_TABLE"], Batches: v["EVS_BATCHES_TABLE"],
				Results: v["EVS_RESULTS_TABLE"], Idempotency: v["EVS_IDEMPOTENCY_TABLE"],
				Inputs: v["EVS_INPUT_BUCKET"],
			},
			QueueURL: v["EVS_QUEUE_URL"],
		}
		if first == "" {
			r, first = got, fn
			continue
		}
		if got != r {
			return samResources{}, fmt.Errorf("%s and %s name different tables or queues", first, fn)
		}
	}
	t := r.Tables
	if t.Keys == "" || t.Batches == "" || t.Results == "" || t.Idempotency == "" || t.Inputs == "" || r.QueueURL == "" {
		return samResources{}, errors.New("every function needs EVS_KEYS_TABLE, EVS_BATCHES_TABLE, EVS_RESULTS_TABLE, EVS_IDEMPOTENCY_TABLE, EVS_INPUT_BUCKET and EVS_QUEUE_URL")
	}
	return r, nil
}

// newSamLocalInitCmd is `evs sam-local-init`.
func newSamLocalInitCmd(c *cli) *cobra.Command {
	var envFile, endpoint string
	cmd := &cobra.Command{
		Use:   "sam-local-init",
		Short: "create the tables, queue and usage plan of infra/sam/env.json on moto_server",
		Long: `Creates on a local moto_server the DynamoDB tables and the SQS queue that the
sam local env-vars file names, and an API Gateway usage plan; keeps what
exists. Prints EVS_KEYS_TABLE=... and EVS_USAGE_PLAN_ID=... for the shell to
eval. make sam-local runs it.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			return samLocalInit(c.ctx, envFile, endpoint, c.stdout)
		},
	}
	cmd.Flags().StringVar(&envFile, "env-vars", "infra/sam/env.json", "the `FILE` given to sam local --env-vars")
	cmd.Flags().StringVar(&endpoint, "endpoint", "http://127.0.0.1:5000", "the `URL` of the local AWS-API server, as this host reaches it")
	return cmd
}

// samLocalInit is `evs sam-local-init`.
func samLocalInit(ctx context.Context, envFile, endpoint string, stdout io.Writer) error {
	if u, err := url.Parse(endpoint); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return usageErrorf("--endpoint %q is not an http:// URL", endpoint)
	}
	vars, err := readEnvVars(envFile)
	if err != nil {
		return err
	}
	res, err := resourcesOf(vars)
	if err != nil {
		return fmt.Errorf("%s: %w", envFile, err)
	}
	// A local server accepts any credentials; fixed ones keep the tool
	// from reaching for a real AWS profile. The region is the one
	// `make sam-local` gives `sam local start-api`.
	cfg := aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		BaseEndpoint: aws.String(strings.TrimRight(endpoint, "/")),
	}
	plan, err := samLocalSetup(ctx, cfg, res)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "EVS_KEYS_TABLE=%s\nEVS_USAGE_PLAN_ID=%s\n", res.Tables.Keys, plan)
	return nil
}

// samLocalSetup creates the tables, the queue and the usage plan on the
// server of cfg and returns the usage plan's id.
func samLocalSetup(ctx context.Context, cfg aws.Config, res samResources) (string, error) {
	if err := dynamostore.CreateTables(ctx, dynamodb.NewFromConfig(cfg), res.Tables); err != nil {
		return "", err
	}
	_, err := dynamostore.S3(cfg).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(res.Tables.Inputs)})
	if _, owned := errors.AsType[*s3types.BucketAlreadyOwnedByYou](err); err != nil && !owned {
		return "", fmt.Errorf("create bucket: %w", err)
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
	// Every page: a server with more plans than one page holds (25) would
	// otherwise get a second local plan at each run.
	for pages := apigateway.NewGetUsagePlansPaginator(gw, &apigateway.GetUsagePlansInput{}); pages.HasMorePages(); {
		plans, err := pages.NextPage(ctx)
		if err != nil {
			return "", fmt.Errorf("list usage plans: %w", err)
		}
		for _, p := range plans.Items {
			if aws.ToString(p.Name) == localUsagePlanName {
				return aws.ToString(p.Id), nil
			}
		}
	}
	p, err := gw.CreateUsagePlan(ctx, &apigateway.CreateUsagePlanInput{
		Name:        aws.String(localUsagePlanName),
		Description: aws.String("make sam-local: keys made with evs keys create --usage-plan"),
	})
	if err != nil {
		return "", fmt.Errorf("create usage plan: %w", err)
	}
	return aws.ToString(p.Id), nil
}
