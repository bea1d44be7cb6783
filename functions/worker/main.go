// Command worker is the batch worker Lambda, fed by the SQS work queue with
// ReportBatchItemFailures: the engine and the sandbox, the DynamoDB store and
// the queue it re-enqueues greylisted work on.
package main

import (
	"context"
	"net/http"
	"os"
	"time"

	awslambda "github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/sqsqueue"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/webhook"
)

func main() {
	cfg, logger, err := config.Load(os.Stdout, true)
	emf := &app.EMF{W: os.Stdout}
	var (
		st     *dynamostore.Store
		awsCfg aws.Config
		engine *verify.Engine
		dns    verify.Reputation
		facts  *dynamostore.DomainFacts
		exits  *verify.Exits
	)
	if err == nil {
		st, awsCfg, err = dynamostore.Open(context.Background(), dynamostore.Tables(cfg.Tables))
	}
	if err == nil {
		// Missing tables or queue are one line here, at cold start, not
		// "unavailable" on every message.
		err = lambda.Check(context.Background(), awsCfg, lambda.Resources{
			Tables: []lambda.Resource{
				{Name: cfg.Tables.Keys, Source: "EVS_KEYS_TABLE"}, {Name: cfg.Tables.Batches, Source: "EVS_BATCHES_TABLE"},
				{Name: cfg.Tables.Results, Source: "EVS_RESULTS_TABLE"},
			},
			Also: []func(context.Context, string, string) error{
				sqsqueue.CheckQueue(sqs.NewFromConfig(awsCfg), lambda.Resource{Name: cfg.QueueURL, Source: "EVS_QUEUE_URL"}),
			},
		})
	}
	if err == nil {
		// The SOCKS5 exit (credentials and all) comes from Secrets
		// Manager, once per cold start, before the engine dials anything.
		err = lambda.ResolveSMTPProxy(context.Background(), awsCfg, &cfg)
	}
	if err == nil {
		// What a domain's accept-all probe said, and how long its server
		// greylists, is shared by every instance, through an item per
		// domain in the Results table.
		facts = st.DomainFacts(dynamostore.DomainFactsConfig{Count: emf.DomainFact, Fault: func(err error) {
			emf.StoreError("batch")
			logger.Warn("domain facts", "error", err.Error())
		}})
		if cfg.SMTP == config.SMTPProxy {
			// Made here, for the egress watch to steer.
			exits, err = verify.NewExits(cfg, emf.SMTPExit)
		}
	}
	if err == nil {
		engine, dns, err = verify.BuildWith(cfg, verify.BuildOptions{Lookup: emf.DNSLookup, Facts: facts, Exits: exits})
	}
	if err != nil {
		logger.Error("worker: init failed", "error", err.Error())
		os.Exit(1)
	}
	// What the engine decides, counted per egress and provider (EMF), and
	// watched as evs serve watches it: an exit whose address the
	// self-check finds listed, or whose refusals by a provider are high in
	// this instance's window, takes no new session while another can.
	var live verify.Verifier = engine
	var checker *verify.SelfChecker
	if cfg.SMTP != config.SMTPOff {
		watches := verify.WatchEgress(cfg, exits, time.Now, emf.SMTPAnswer)
		checker = &verify.SelfChecker{Watches: watches, Rep: dns, Zones: cfg.Blocklists, HELO: cfg.HELO,
			Every: cfg.SelfCheckEvery, Log: logger, Done: emf.EgressCheck}
		live = watches.Watched(engine, checker.Due)
	}
	w := &batch.Worker{
		Queue:    sqsqueue.New(sqs.NewFromConfig(awsCfg), cfg.QueueURL),
		Store:    st,
		Accounts: st,
		// Sessions of a minute fit the function's 300 s timeout, so a
		// silent server ends as unknown/timeout instead of a message
		// redelivered until it dead-letters. A group runs its sessions at
		// once, on session slots of its provider: two for the 200
		// addresses a work message holds at most, so a group at a slow
		// server is billed for half the time (BenchmarkWorkerCost,
		// docs/aws.md).
		Processor: &batch.Processor{
			Engine:        app.Count(live, emf),
			Sandbox:       app.Count(verify.NewSandbox(time.Now), emf),
			SessionLimit:  time.Minute,
			GroupSessions: 2,
		},
		Logger:   logger,
		Deadline: cfg.BatchDeadline,
		// A live batch's first retry at a domain known to greylist waits
		// as long as its server deferred an earlier batch.
		Grey: facts,
		// The scheduled sweep (template.yaml, SweepSchedule) re-starts
		// what no message carries any more.
		Sweeper: st,
		Webhooks: &webhook.Deliverer{
			Store: st, Client: webhook.NewClient(cfg.Egress), Logger: logger, Observe: emf.WebhookDelivery, Body: api.EventBody,
		},
		// One account's attempts in flight are bounded across every
		// invocation, as `evs serve` bounds them in its process.
		WebhookSlots: st,
		// Export jobs the requests function queued: the CSV rendered by
		// the same function as Accept: text/csv, written to S3 in parts.
		Exports:   st,
		ExportCSV: api.ExportCSV(st),
	}
	// Reported outcomes change verdicts, as on /v1/verify.
	w.History = st
	w.ShareDomainCounts = cfg.OutcomeShareDomains
	if cfg.CacheTTL > 0 {
		// The account result cache, in the Results table, as verify uses
		// it: a batch reuses recent verdicts and keeps its own.
		w.Cache = &cache.Cache{Store: st, TTL: cfg.CacheTTL, Now: time.Now, Count: emf.CacheRequest}
	}
	if cfg.SMTP != config.SMTPOff {
		// The egress self-check, as evs serve runs it: on the hourly
		// schedule's message (template.yaml, SelfCheckSchedule), once at
		// cold start, beside the first invocation, so a new deployment or
		// a new exit address is checked within minutes, not an hour, and
		// in the background of any work that finds the last findings
		// older than EVS_SELFCHECK_EVERY: the schedule's message reaches
		// one instance, and each steers its own exits. It is a few DNS
		// queries, and never delays a message.
		w.SelfCheck = checker.Run
		checker.Due()
		// Politeness per provider and egress address across every
		// concurrent invocation.
		w.Polite = &batch.Polite{Parking: st, Gate: &politeness.Gate{
			State: st, MX: engine, Egress: cfg.EgressName(),
			Limits: politeness.Limits{Sessions: cfg.ProviderSessions, RcptPerMin: cfg.ProviderRcptPerMin},
		}}
	}
	handler := sqsqueue.Handler(w)
	if cfg.SESQueueARN != "" {
		// The stack's SES notification queue (SesNotificationTopicArn):
		// its records are SNS messages, verified here, whose outcomes are
		// the SesNotificationAccount account's.
		client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		ses := &sqsqueue.SESQueue{
			QueueARN: cfg.SESQueueARN,
			Receiver: &api.SNSOutcomes{
				Verifier: api.NewSNSVerifier(api.HTTPCertFetcher{Client: client}, api.AWSSNSHost, nil, time.Now),
				Topics:   cfg.SNSTopics,
				// A cross-account topic's subscription is confirmed by the
				// first message on the queue.
				Confirm: api.HTTPConfirm(client),
				Store:   st,
				TTL:     cfg.OutcomeTTL,
			},
			Account: cfg.SESAccount, Accounts: st, Logger: logger,
		}
		handler = ses.Route(handler)
	}
	awslambda.Start(handler)
}
