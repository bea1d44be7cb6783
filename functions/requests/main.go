// Command requests is the Lambda function behind every /v1/requests and
// /v1/outcomes route, and the web console's files (/console/, no key): the
// handlers over DynamoDB and S3, with the SQS queue that hands new batches
// and export jobs to the worker. It verifies nothing itself.
package main

import (
	"context"
	"os"

	awslambda "github.com/aws/aws-lambda-go/lambda"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/lambda"
)

func main() {
	ctx := context.Background()
	a, err := app.OnAWS(ctx, app.RequestsFunction)
	if err != nil {
		os.Exit(1) // OnAWS logged the one line
	}
	h, err := a.RequestsHandler(ctx)
	if err != nil {
		a.Fail(err)
	}
	awslambda.Start(lambda.Proxy(h))
}
