// Command authorizer is the API's REQUEST Lambda authorizer: it resolves the
// X-Api-Key header to an account. It links only the configuration, the
// DynamoDB keys store and the authorizer: no engine, no queue.
package main

import (
	"context"
	"os"

	awslambda "github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/lambda"
)

func main() {
	cfg, err := config.FromEnv(config.OSEnv, true)
	logger := cfg.Logger(os.Stdout)
	var st *dynamostore.Store
	if err == nil {
		var awsCfg aws.Config
		st, awsCfg, err = dynamostore.Open(context.Background(), dynamostore.Tables(cfg.Tables), config.OSEnv)
		if err == nil {
			// A table that is not there is one line here, at cold start,
			// not "unavailable" on every call.
			err = lambda.Check(context.Background(), awsCfg, lambda.Resources{Tables: []lambda.Resource{{Name: cfg.Tables.Keys, Source: "EVS_KEYS_TABLE"}}})
		}
	}
	if err != nil {
		// A bad setting fails the function's init with one line, never a
		// panic.
		logger.Error("authorizer: init failed", "error", err.Error())
		os.Exit(1)
	}
	awslambda.Start(lambda.Authorizer(authorizer.New(st)))
}
