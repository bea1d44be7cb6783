// Command requests is the Lambda function behind every /v1/requests route
// (batch verification). It is a composition root only: the handlers live in
// internal/api, the queue adapter in internal/sqsqueue.
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
		log.Fatalf("requests: %v", err)
	}
	lambda.Start(env.API().Requests)
}
