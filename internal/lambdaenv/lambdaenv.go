// Package lambdaenv wires the Lambda functions from their environment: the
// AWS SDK configuration, the DynamoDB store, the SQS queue and the engine.
// Each functions/<name>/main.go calls Load and starts one handler.
package lambdaenv

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/sqsqueue"
	"github.com/evs-dev/evs/internal/verify"
)

// Env is what every function shares.
type Env struct {
	Config config.Config
	AWS    aws.Config
	Store  *dynamostore.Store
	Logger *slog.Logger
}

// Load reads the environment. The SDK honours AWS_ENDPOINT_URL, which is how
// the end-to-end tests point the functions at a local AWS-API server.
func Load(ctx context.Context) (*Env, error) {
	cfg, err := config.FromEnv(os.Getenv, true)
	if err != nil {
		return nil, err
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("AWS configuration: %w", err)
	}
	level := slog.LevelInfo
	if os.Getenv("EVS_LOG_LEVEL") == "debug" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
	st := dynamostore.New(dynamostore.Config{
		Client: dynamodb.NewFromConfig(awsCfg),
		Tables: dynamostore.TablesFromEnv(),
		Now:    time.Now,
	})
	return &Env{Config: cfg, AWS: awsCfg, Store: st, Logger: logger}, nil
}

func (e *Env) queue() *sqsqueue.Queue {
	return sqsqueue.New(sqs.NewFromConfig(e.AWS), os.Getenv("EVS_QUEUE_URL"))
}

func (e *Env) engine() api.Verifier {
	eng, _, err := e.Config.Engine()
	if err != nil {
		// Only a malformed configuration gets here, and FromEnv already
		// checked it; fail loudly at cold start.
		panic(err)
	}
	return eng
}

// API returns the API handlers.
func (e *Env) API() *api.Handler {
	return api.New(api.Deps{
		Engine:      e.engine(),
		Sandbox:     verify.NewSandbox(time.Now),
		Idempotency: idempotency.New(e.Store, time.Now),
		Batches:     e.Store,
		Queue:       e.queue(),
		Retention:   e.Config.Retention,
		Logger:      e.Logger,
	})
}

// Worker returns the batch worker.
func (e *Env) Worker() *sqsqueue.Worker {
	eng := e.engine().(batch.Verifier)
	return &sqsqueue.Worker{
		Queue:     e.queue(),
		Store:     e.Store,
		Accounts:  e.Store,
		Processor: &batch.Processor{Engine: eng, Sandbox: verify.NewSandbox(time.Now)},
		Logger:    e.Logger,
	}
}
