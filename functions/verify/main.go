// Command verify is the Lambda function behind POST /v1/verify: the engine,
// the test-mode sandbox and idempotency on DynamoDB. It needs no queue.
package main

import (
	"context"
	"os"
	"time"

	awslambda "github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/verify"
)

func main() {
	cfg, logger, err := config.Load(os.Stdout, true)
	emf := &app.EMF{W: os.Stdout}
	var (
		st     *dynamostore.Store
		awsCfg aws.Config
		engine *verify.Engine
		dns    verify.Reputation
		exits  *verify.Exits
	)
	if err == nil {
		st, awsCfg, err = dynamostore.Open(context.Background(), dynamostore.Tables(cfg.Tables))
	}
	if err == nil {
		// Missing tables are one line here, at cold start, not
		// "unavailable" on every call. (Batches, where the quota counts,
		// may only be updated by this function, not described.)
		err = lambda.Check(context.Background(), awsCfg, lambda.Resources{Tables: []lambda.Resource{
			{Name: cfg.Tables.Keys, Source: "EVS_KEYS_TABLE"}, {Name: cfg.Tables.Idempotency, Source: "EVS_IDEMPOTENCY_TABLE"},
		}})
	}
	if err == nil {
		// The SOCKS5 exit (credentials and all) comes from Secrets
		// Manager, once per cold start, before the engine dials anything.
		err = lambda.ResolveSMTPProxy(context.Background(), awsCfg, &cfg)
	}
	if err == nil {
		// What a domain's accept-all probe said is shared with every
		// instance and the batch worker, through an item per domain in
		// the Results table.
		facts := st.DomainFacts(dynamostore.DomainFactsConfig{Count: emf.DomainFact, Fault: func(err error) {
			emf.StoreError("api")
			logger.Warn("domain facts", "error", err.Error())
		}})
		// /v1/verify keeps the worker's politeness per provider and egress
		// address: its session slots, RCPT budget and pauses, in DynamoDB.
		gate := &politeness.Gate{State: st, Egress: cfg.EgressName(),
			Limits: politeness.Limits{Sessions: cfg.ProviderSessions, RcptPerMin: cfg.ProviderRcptPerMin}}
		if cfg.SMTP == config.SMTPProxy {
			// Made here, for the egress watch to steer.
			exits, err = verify.NewExits(cfg, emf.SMTPExit)
		}
		if err == nil {
			engine, dns, err = verify.BuildWith(cfg, verify.BuildOptions{Lookup: emf.DNSLookup, Facts: facts, Gate: gate, Exits: exits})
		}
	}
	if err != nil {
		logger.Error("verify: init failed", "error", err.Error())
		os.Exit(1)
	}
	// This function probes too, so it watches its egress as the worker
	// does: verdicts counted per egress and provider (EMF), an exit whose
	// address its own self-check finds listed, or whose refusals by a
	// provider are high in this instance's window, avoided while another
	// exit can take the session. The self-check runs at cold start and
	// then in the background of a call that finds the findings older than
	// EVS_SELFCHECK_EVERY; no call waits for it.
	var live verify.Verifier = engine
	if cfg.SMTP != config.SMTPOff {
		watches := verify.WatchEgress(cfg, exits, time.Now, emf.SMTPAnswer)
		checker := &verify.SelfChecker{Watches: watches, Rep: dns, Zones: cfg.Blocklists, HELO: cfg.HELO,
			Every: cfg.SelfCheckEvery, Log: logger, Done: emf.EgressCheck}
		live = watches.Watched(engine, checker.Due)
		checker.Due()
	}
	var verdicts api.ResultCache
	if cfg.CacheTTL > 0 {
		// The account result cache, in the Results table
		// (dynamostore/resultcache.go).
		verdicts = &cache.Cache{Store: st, TTL: cfg.CacheTTL, Now: time.Now, Count: emf.CacheRequest}
	}
	h := api.New(api.Deps{
		Engine:      app.Count(live, emf),
		Sandbox:     app.Count(verify.NewSandbox(time.Now), emf),
		Cache:       verdicts,
		Idempotency: idempotency.New(st, time.Now),
		Logger:      logger,
		// Counted in the Batches table (dynamostore/quota.go).
		Quota: api.Quota{Store: st, Limit: cfg.QuotaAddresses, Period: cfg.QuotaPeriod, IdempotencyKeys: cfg.MaxIdempotencyKeys},
		// Publishable keys' limits, counted beside the quota: no Lambda
		// instance sees every call.
		PublishableLimits: api.PublishableLimits{PerAddress: api.PublishablePerAddress, PerKey: api.PublishablePerKey},
		// Reported outcomes (Batches table, dynamostore/outcomes.go)
		// change verdicts: read only here, POSTed to the requests function.
		Outcomes:            st,
		OutcomeShareDomains: cfg.OutcomeShareDomains,
	})
	// API Gateway has checked the key and the rate: the routes need no
	// guard here.
	awslambda.Start(lambda.Proxy(api.Mux(api.ObserveOptions{Logger: logger, Done: app.Calls(emf)}, h.MountVerify(nil))))
}
