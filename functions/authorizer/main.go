// Command authorizer is the API's REQUEST Lambda authorizer: it resolves the
// X-Api-Key header to an account. It links only the configuration, the
// DynamoDB keys store and the authorizer: no engine, no queue.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
)

func main() {
	cfg, logger, err := config.Load(os.Stdout, true)
	var st *dynamostore.Store
	if err == nil {
		st, _, err = dynamostore.Open(context.Background(), dynamostore.Tables(cfg.Tables))
	}
	if err != nil {
		// A bad setting fails the function's init with one line, never a
		// panic.
		logger.Error("authorizer: init failed", "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(authorizer.New(st).Handle)
}
