// Command worker is the batch worker Lambda, fed by the SQS work queue with
// ReportBatchItemFailures. The logic lives in internal/batch and the queue
// adapter in internal/sqsqueue.
package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/evs-dev/evs/internal/lambdaenv"
)

func main() {
	env, err := lambdaenv.Load(context.Background())
	if err != nil {
		log.Fatalf("worker: %v", err)
	}
	lambda.Start(env.Worker().Handle)
}
