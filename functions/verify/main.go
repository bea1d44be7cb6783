// Command verify is the Lambda function behind POST /v1/verify. It is a
// composition root only: the handler lives in internal/api.
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
		log.Fatalf("verify: %v", err)
	}
	lambda.Start(env.API().Verify)
}
