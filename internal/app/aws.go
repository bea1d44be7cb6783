package app

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/webhook"
)

// Function is a Lambda function of the stack that runs the runtime (the
// authorizer runs only the key lookup, and links no engine).
type Function string

// The functions, by the name their init-failure line gives.
const (
	VerifyFunction   Function = "verify"
	RequestsFunction Function = "requests"
	WorkerFunction   Function = "worker"
)

// AWS is a Lambda function's runtime over its ports on AWS: the DynamoDB
// store (politeness, domain facts, result cache, outcomes), the SQS queue
// and EMF metrics on stdout.
type AWS struct {
	*Runtime
	Store *dynamostore.Store
	// Queue is the SQS work queue; nil for the verify function.
	Queue *Queue
	EMF   *EMF
	fn    Function
}

// OnAWS builds fn's runtime at its cold start, checking that the tables
// and queue fn uses exist (one line here, not "unavailable" on every
// call). A failure is logged as one line naming fn; the caller exits.
func OnAWS(ctx context.Context, fn Function) (*AWS, error) {
	return onAWSFrom(ctx, fn, config.OSEnv, time.Now)
}

// onAWSFrom is OnAWS reading getenv, its runtime on the clock now: the
// tests give each deployment an environment of its own, so they run in
// parallel, and a clock of their own where time is their subject.
func onAWSFrom(ctx context.Context, fn Function, getenv func(string) string, now func() time.Time) (*AWS, error) {
	cfg, err := config.FromEnv(getenv, true)
	logger := cfg.Logger(os.Stdout)
	var a *AWS
	if err == nil {
		a, err = onAWS(ctx, fn, cfg, logger, getenv, now)
	}
	if err != nil {
		// A bad setting fails the function's init with one line, never a
		// panic.
		logger.Error(string(fn)+": init failed", "error", err.Error())
		return nil, err
	}
	return a, nil
}

func onAWS(ctx context.Context, fn Function, cfg config.Config, logger *slog.Logger, getenv func(string) string, now func() time.Time) (*AWS, error) {
	st, awsCfg, err := dynamostore.Open(ctx, cfg.Tables, getenv)
	if err != nil {
		return nil, err
	}
	t := cfg.Tables
	keys := lambda.Resource{Name: t.Keys, Source: "EVS_KEYS_TABLE"}
	batches := lambda.Resource{Name: t.Batches, Source: "EVS_BATCHES_TABLE"}
	results := lambda.Resource{Name: t.Results, Source: "EVS_RESULTS_TABLE"}
	idem := lambda.Resource{Name: t.Idempotency, Source: "EVS_IDEMPOTENCY_TABLE"}
	var res lambda.Resources
	switch fn {
	case VerifyFunction:
		// Batches, where the quota counts, may only be updated by this
		// function, not described.
		res.Tables = []lambda.Resource{keys, idem}
	case RequestsFunction:
		res.Tables = []lambda.Resource{batches, results, idem}
	default:
		res.Tables = []lambda.Resource{keys, batches, results}
	}
	var q *Queue
	if fn != VerifyFunction {
		client := sqs.NewFromConfig(awsCfg)
		res.Also = append(res.Also, CheckQueue(client, lambda.Resource{Name: cfg.QueueURL, Source: "EVS_QUEUE_URL"}))
		q = NewQueue(client, cfg.QueueURL)
	}
	if err := lambda.Check(ctx, awsCfg, res); err != nil {
		return nil, err
	}
	if fn == RequestsFunction {
		// It verifies nothing: no exits to fetch, no self-check to run.
		cfg.SMTP = config.SMTPOff
	} else if err := lambda.ResolveSMTPProxy(ctx, awsCfg, &cfg); err != nil {
		// The SOCKS5 exit (credentials and all) comes from Secrets
		// Manager, once per cold start, before the engine dials anything.
		return nil, err
	}
	// The worker's counts are summed per invocation (WorkerHandler).
	emf := &EMF{W: os.Stdout, Hold: fn == WorkerFunction}
	source := "api"
	if fn == WorkerFunction {
		source = "batch"
	}
	rt, err := Build(cfg, Ports{
		Store: st,
		// Session slots, RCPT budgets and pauses per provider and egress
		// address, shared by every instance of both probing functions.
		Politeness: st,
		// What a domain's accept-all probe said, and how long its server
		// greylists, through an item per domain in the Results table.
		Facts: st.DomainFacts(dynamostore.DomainFactsConfig{Count: emf.DomainFact, Fault: func(err error) {
			emf.StoreError(source)
			logger.Warn("domain facts", "error", err.Error())
		}}),
		Metrics: emf,
		// Each instance steers its exits by its own self-check, run at
		// cold start and then in the background of a call that finds the
		// findings older than EVS_SELFCHECK_EVERY; no call waits for it.
		CheckOnUse: true,
		Logger:     logger,
		Now:        now,
	})
	if err != nil {
		return nil, err
	}
	if rt.SelfCheck != nil {
		rt.SelfCheck.Due()
	}
	return &AWS{Runtime: rt, Store: st, Queue: q, EMF: emf, fn: fn}, nil
}

// Mux is the routes mount adds, each call observed (its log line and
// metrics). API Gateway has checked the key and the rate: the routes need
// no guard here.
func (a *AWS) Mux(mount ...func(*http.ServeMux)) http.Handler {
	return api.Mux(api.ObserveOptions{Logger: a.logger, Done: Calls(a.EMF)}, mount...)
}

// requestsAPI is the batch handlers of the requests function: large lists,
// results and exports through S3, and work handed to the worker's queue.
func (a *AWS) requestsAPI() (*api.Handler, error) {
	q := a.Queue
	return a.API(api.Deps{
		Queue: q,
		// What Lambda can always take once API Gateway has base64-encoded
		// the body, not the contract's 6 MiB (api.LambdaMaxBatchBody).
		MaxBatchBody: api.LambdaMaxBatchBody,
		// Large CSV lists would not fit Lambda's 6 MB reply nor API
		// Gateway's 29 s: the worker writes them to S3 while the client polls.
		ExportJobs: &api.ExportJobs{
			Store: a.Store,
			Queue: func(ctx context.Context, j store.ExportJob) error {
				return q.Send(ctx, []batch.Message{batch.ExportMessage(j)}, 0)
			},
		},
		Uploads: a.Store, // large lists go to S3 with a pre-signed PUT
		Callbacks: api.Callbacks{
			// A cancel makes a batch final here, not in the worker: hand
			// its webhook to the worker through the queue.
			Finalized: func(ctx context.Context, b evs.Batch) {
				if err := q.Finalized(ctx, b); err != nil {
					a.logger.ErrorContext(ctx, "webhook: could not queue the delivery of a cancelled batch", "batchId", b.ID, "error", err.Error())
				}
			},
		},
	})
}

// worker is the batch worker of the worker function: SQS beneath it,
// work that waits for its provider parked in DynamoDB, sessions sized to
// the function's timeout, webhooks and exports written from it.
func (a *AWS) worker() *batch.Worker {
	w := a.Runtime.Worker(batch.Worker{
		Queue: a.Queue,
		// Sessions of a minute fit the function's timeout, so a silent
		// server ends as unknown/timeout instead of a message redelivered
		// until it dead-letters. Two sessions at once bill a group at a
		// slow server for half the time (BenchmarkWorkerCost).
		Processor: &batch.Processor{SessionLimit: time.Minute, GroupSessions: 2},
		Sweeper:   a.Store,
		Webhooks: &webhook.Deliverer{
			Store: a.Store, Client: webhook.NewClient(a.Config.Egress), Logger: a.logger, Observe: a.EMF.WebhookDelivery, Body: api.EventBody,
		},
		WebhookSlots: a.Store,
		Exports:      a.Store,
		ExportCSV:    api.ExportCSV(a.Store, a.Ledger),
		Polite:       &batch.Polite{Parking: a.Store}, // waiting work is parked, not waited for
	})
	if a.SelfCheck != nil {
		// The hourly schedule's message reaches one instance; each steers
		// its own exits, so each also checks when its findings grow old.
		w.SelfCheck = a.SelfCheck.Run
	}
	return w
}

// VerifyHandler is the verify function's: POST /v1/verify, with the
// publishable keys' limits counted beside the quota (no Lambda instance
// sees every call), and reported outcomes read to change verdicts.
func (a *AWS) VerifyHandler() (http.Handler, error) {
	h, err := a.API(api.Deps{
		PublishableLimits: api.PublishableDefaults(a.Config),
	})
	if err != nil {
		return nil, err
	}
	return a.Mux(h.MountVerify(nil)), nil
}

// RequestsHandler is the requests function's: the batch and outcome
// routes, and the web console's files (no key), whose page PUTs large
// lists straight to the upload bucket: its CSP allows that origin, and
// no other.
func (a *AWS) RequestsHandler(ctx context.Context) (http.Handler, error) {
	origin, err := a.Store.UploadOrigin(ctx)
	if err != nil {
		return nil, err
	}
	web, err := api.NewConsole(api.ConsoleOptions{UploadOrigin: origin})
	if err != nil {
		return nil, err
	}
	h, err := a.requestsAPI()
	if err != nil {
		return nil, err
	}
	return a.Mux(h.MountBatches(nil), h.MountOutcomes(nil), func(mux *http.ServeMux) { api.MountConsole(mux, web) }), nil
}

// WorkerHandler is the worker function's SQS handler: the work queue's
// messages go to the batch worker; with EVS_SES_QUEUE_ARN set, the stack's
// SES notification queue's records are SNS messages, verified here, whose
// outcomes are the SesNotificationAccount account's.
func (a *AWS) WorkerHandler() func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	work := SQSHandler(a.worker())
	// Lambda may freeze the process once the handler returns: the counts
	// held for EMF are written before.
	handler := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		defer a.EMF.Flush()
		return work(ctx, ev)
	}
	if a.Config.SESQueueARN == "" {
		return handler
	}
	// Under the egress policy, without redirects: as `evs serve` fetches.
	client := webhook.NewClient(a.Config.Egress)
	ses := &SESQueue{
		QueueARN: a.Config.SESQueueARN,
		Receiver: &api.SNSOutcomes{
			Verifier: api.NewSNSVerifier(api.HTTPCertFetcher{Client: client}, api.AWSSNSHost, nil, time.Now),
			Topics:   a.Config.SNSTopics,
			// A cross-account topic's subscription is confirmed by the
			// first message on the queue.
			Confirm: api.HTTPConfirm(client),
			Store:   a.Store,
			Ledger:  a.Ledger,
			TTL:     a.Config.OutcomeTTL,
		},
		Account: a.Config.SESAccount, Accounts: a.Store, Logger: a.logger,
	}
	return ses.Route(handler)
}

// Fail ends a function whose init failed after OnAWS: one line naming it,
// then exit status 1, never a panic.
func (a *AWS) Fail(err error) {
	a.logger.Error(string(a.fn)+": init failed", "error", err.Error())
	os.Exit(1)
}
