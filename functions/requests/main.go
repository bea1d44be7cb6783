// Command requests is the Lambda function behind every /v1/requests route
// (batch verification): the batch handlers on DynamoDB, with the SQS queue
// that hands new batches to the worker. It verifies nothing itself. It also
// serves the web console's static files (/console/, no key), the same
// embedded files and handler as `evs serve`.
package main

import (
	"context"
	"net/http"
	"os"
	"time"

	awslambda "github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/sqsqueue"
	"github.com/evs-dev/evs/internal/store"
)

func main() {
	cfg, logger, err := config.Load(os.Stdout, true)
	var (
		st     *dynamostore.Store
		awsCfg aws.Config
	)
	if err == nil {
		st, awsCfg, err = dynamostore.Open(context.Background(), dynamostore.Tables(cfg.Tables))
	}
	if err == nil {
		// Missing tables or queue are one line here, at cold start, not
		// "unavailable" on every call.
		err = lambda.Check(context.Background(), awsCfg, lambda.Resources{
			Tables: []lambda.Resource{
				{Name: cfg.Tables.Batches, Source: "EVS_BATCHES_TABLE"}, {Name: cfg.Tables.Results, Source: "EVS_RESULTS_TABLE"},
				{Name: cfg.Tables.Idempotency, Source: "EVS_IDEMPOTENCY_TABLE"},
			},
			Also: []func(context.Context, string, string) error{
				sqsqueue.CheckQueue(sqs.NewFromConfig(awsCfg), lambda.Resource{Name: cfg.QueueURL, Source: "EVS_QUEUE_URL"}),
			},
		})
	}
	var web http.Handler
	if err == nil {
		// The console's page PUTs large lists straight to the bucket of
		// the upload URLs: its CSP allows that origin, and no other.
		var origin string
		origin, err = st.UploadOrigin(context.Background())
		if err == nil {
			web, err = api.NewConsole(api.ConsoleOptions{UploadOrigin: origin})
		}
	}
	if err != nil {
		logger.Error("requests: init failed", "error", err.Error())
		os.Exit(1)
	}
	q := sqsqueue.New(sqs.NewFromConfig(awsCfg), cfg.QueueURL)
	h := api.New(api.Deps{
		Idempotency: idempotency.New(st, time.Now),
		Batches:     st,
		Queue:       q,
		Retention:   cfg.Retention,
		Logger:      logger,
		// What Lambda can always take once API Gateway has base64-encoded
		// the body, not the contract's 6 MiB (api.LambdaMaxBatchBody).
		MaxBatchBody: api.LambdaMaxBatchBody,
		// A CSV result list over 4 MiB would not fit Lambda's 6 MB reply,
		// and GET /v1/requests/{id}/export hands out a pre-signed S3 GET
		// whatever the size (the console fetches it without the key):
		// both are jobs the worker writes to S3 while the client polls,
		// since a million rows take longer than API Gateway's 29 s.
		ExportJobs: &api.ExportJobs{
			Store: st,
			Queue: func(ctx context.Context, j store.ExportJob) error {
				return q.Send(ctx, []batch.Message{batch.ExportMessage(j)}, 0)
			},
		},
		// Lists of up to 1,000,000 addresses go to S3 with a pre-signed
		// PUT; the batch is created from the object (dynamostore/uploads.go).
		Uploads: st,
		// Counted in the Batches table (dynamostore/quota.go).
		Quota: api.Quota{Store: st, Limit: cfg.QuotaAddresses, Period: cfg.QuotaPeriod, IdempotencyKeys: cfg.MaxIdempotencyKeys},
		// Exact on DynamoDB: see dynamostore.CreateBatchWithin.
		MaxActiveBatches: cfg.MaxActiveBatches,
		// POST/DELETE /v1/outcomes and the report (contract, section 18),
		// in the Batches table (dynamostore/outcomes.go).
		Outcomes:   st,
		OutcomeTTL: cfg.OutcomeTTL,
		Callbacks: api.Callbacks{
			Egress:     cfg.Egress,
			Deliveries: st,
			// A cancel makes a batch final here, not in the worker: hand
			// its webhook to the worker through the queue.
			Finalized: func(ctx context.Context, b evs.Batch) {
				if err := q.Finalized(ctx, b); err != nil {
					logger.ErrorContext(ctx, "webhook: could not queue the delivery of a cancelled batch", "batchId", b.ID, "error", err.Error())
				}
			},
		},
	})
	// API Gateway has checked the key and the rate: the routes need no
	// guard here. The console's routes have no authorizer.
	o := api.ObserveOptions{Logger: logger, Done: app.Calls(&app.EMF{W: os.Stdout})}
	awslambda.Start(lambda.Proxy(api.Mux(o, h.MountBatches(nil), h.MountOutcomes(nil), func(mux *http.ServeMux) { api.MountConsole(mux, web) })))
}
