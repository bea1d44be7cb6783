// Command worker is the batch worker Lambda, fed by the SQS work queue
// with ReportBatchItemFailures: the runtime app.OnAWS builds (engine,
// gate, exits, self-check, sandbox, DynamoDB store) with the queue it
// sends work back on, and, when the stack has one, the SES notification
// queue's outcomes.
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
