// Command requests is the Lambda function behind every /v1/requests route
// (batch verification): the batch handlers on DynamoDB, with the SQS queue
// that hands new batches to the worker. It verifies nothing itself.
package main

import (
	"context"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/sqsqueue"
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
	if err != nil {
		logger.Error("requests: init failed", "error", err.Error())
		os.Exit(1)
	}
	h := api.New(api.Deps{
		Idempotency: idempotency.New(st, time.Now),
		Batches:     st,
		Queue:       sqsqueue.New(sqs.NewFromConfig(awsCfg), cfg.QueueURL),
		Retention:   cfg.Retention,
		Logger:      logger,
		// Exact on DynamoDB: see dynamostore.CreateBatchWithin.
		MaxActiveBatches: cfg.MaxActiveBatches,
	})
	lambda.Start(h.Requests)
}
