// Command authorizer is the API's REQUEST Lambda authorizer: it resolves the
// X-Api-Key header to an account. The logic lives in internal/authorizer.
package main

import (
	"context"
	"log"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/lambdaenv"
)

func main() {
	env, err := lambdaenv.Load(context.Background())
	if err != nil {
		log.Fatalf("authorizer: %v", err)
	}
	lambda.Start(authorizer.New(env.Store).Handle)
}
