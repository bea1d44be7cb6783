// Command verify is the Lambda function behind POST /v1/verify: the
// runtime app.OnAWS builds, behind the API Gateway adapter. It needs no
// queue.
package main

import (
	"context"
	"os"

	awslambda "github.com/aws/aws-lambda-go/lambda"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/lambda"
)

func main() {
	a, err := app.OnAWS(context.Background(), app.VerifyFunction)
	if err != nil {
		os.Exit(1) // OnAWS logged the one line
	}
	h, err := a.VerifyHandler()
	if err != nil {
		a.Fail(err)
	}
	awslambda.Start(lambda.Proxy(h))
}
