// Command worker is the batch worker Lambda, fed by the SQS work queue
// and, when the stack has one, the SES notification queue.
package main

import (
	"context"
	"os"

	awslambda "github.com/aws/aws-lambda-go/lambda"

	"github.com/evs-dev/evs/internal/app"
)

func main() {
	a, err := app.OnAWS(context.Background(), app.WorkerFunction)
	if err != nil {
		os.Exit(1) // OnAWS logged the one line
	}
	awslambda.Start(a.WorkerHandler())
}
