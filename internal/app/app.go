// Package app is the one composition root of the service. Build makes the
// runtime both deployments run, the same way for each; the edges take what
// they serve from it (API, Worker). A deployment differs only in its Ports.
//
// The package also says what the runtime reports (Observer, the metric
// names) and its Lambda form (EMF). The Prometheus form is `evs serve`'s,
// so the Prometheus client is never linked into a Lambda. No metric label
// ever holds an address, a key or a domain.
package app

import (
	"cmp"
	"errors"
	"log/slog"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/verify"
)

// Facts keeps what the runtime learns about a domain's server, shared by
// every request, batch and account: its accept-all answer (the engine) and
// its greylisting delay (the batches).
type Facts interface {
	verify.DomainFacts
	batch.GreyFacts
}

// Ports are what a deployment differs in.
type Ports struct {
	// Store is the deployment's store. What a store cannot keep (a
	// test's: outcomes, quota counters, a result cache) is off.
	Store      store.Store
	Politeness politeness.State // shared gate state; nil: this process's memory
	Facts      Facts            // domain facts; nil: this process's memory
	Verdicts   cache.Store      // result cache's store; nil: Store's own
	Metrics    Observer         // nil counts nothing
	// CheckOnUse runs the egress self-check in the background of a call
	// that finds its findings stale, where nothing runs between requests
	// (a Lambda instance); evs serve runs it on a ticker instead.
	CheckOnUse bool
	// Engine, when set, replaces the engine built from the configuration
	// (a test's), with Exits the dialer it probes through, if any.
	Engine verify.Verifier
	Exits  *verify.Exits
	// FreeBytes reads the data directory's free space (`evs serve`): below
	// EVS_MIN_FREE_BYTES the ledger refuses writes. Nil on AWS.
	FreeBytes func() (uint64, error)
	Now       func() time.Time
	Logger    *slog.Logger
}

// Runtime is what Build makes: the parts the edges serve.
type Runtime struct {
	Config config.Config
	// Live verifies for live accounts: the engine, its verdicts counted
	// and watched per egress. Sandbox answers test-mode accounts.
	Live, Sandbox verify.Verifier
	Gate          *politeness.Gate      // paces SMTP sessions of batches and /v1/verify
	Exits         *verify.Exits         // SOCKS exits (EVS_SMTP=proxy); nil otherwise
	Watches       *verify.EgressWatches // count verdicts per egress and steer the exits
	SelfCheck     *verify.SelfChecker   // nil when SMTP is off or no resolver could be made
	Facts         Facts
	Cache         *cache.Cache // nil when EVS_CACHE_TTL is 0 or the store keeps none
	Outcomes      api.Outcomes // nil when the store keeps none
	Ledger        api.Ledger   // counts against each account's storage quota and outcomes cap

	store   store.Store
	metrics Observer
	now     func() time.Time
	logger  *slog.Logger
}

// Build makes the runtime of cfg over p.
func Build(cfg config.Config, p Ports) (*Runtime, error) {
	if p.Store == nil {
		return nil, errors.New("app: a store is required")
	}
	r := &Runtime{Config: cfg, store: p.Store, metrics: cmp.Or[Observer](p.Metrics, Nop{}), now: p.Now, logger: cmp.Or(p.Logger, slog.Default())}
	if r.now == nil {
		r.now = time.Now
	}
	var counted func(egress, provider string, blocked bool)
	if m, ok := p.Metrics.(interface {
		SMTPAnswer(egress, provider string, blocked bool)
	}); ok {
		counted = m.SMTPAnswer
	}
	r.Facts = p.Facts
	if r.Facts == nil {
		fc := cache.FactsConfig{Now: r.now}
		if m, ok := p.Metrics.(interface{ DomainFact(string) }); ok {
			fc.Count = m.DomainFact
		}
		r.Facts = cache.NewFacts(fc)
	}
	r.Gate = &politeness.Gate{
		State:  p.Politeness,
		Limits: politeness.Limits{Sessions: cfg.ProviderSessions, RcptPerMin: cfg.ProviderRcptPerMin},
		Egress: cfg.EgressName(),
	}
	engine, exits := p.Engine, p.Exits
	var rep verify.Reputation
	if engine == nil {
		if exits == nil && cfg.SMTP == config.SMTPProxy {
			// Made here, for the egress watch to steer.
			var health func(int, string, bool)
			if m, ok := p.Metrics.(interface{ SMTPExit(int, string, bool) }); ok {
				health = m.SMTPExit
			}
			x, err := verify.NewExits(cfg, health)
			if err != nil {
				return nil, err
			}
			exits = x
		}
		var lookups func(time.Duration)
		if p.Metrics != nil {
			lookups = p.Metrics.DNSLookup
		}
		e, res, err := verify.BuildWith(cfg, verify.BuildOptions{Lookup: lookups, Facts: r.Facts, Gate: r.Gate, Exits: exits})
		if err != nil {
			return nil, err
		}
		engine, rep = e, res
	} else if res, err := verify.NewResolver(cfg); err == nil {
		rep = res
	}
	if mx, ok := engine.(politeness.PreferredMX); ok {
		r.Gate.MX = mx
	}
	r.Exits = exits
	if exits != nil {
		// Each exit is an egress address with a budget of its own.
		r.Gate.Exits = exits.Order
	}
	r.Watches = verify.WatchEgress(cfg, exits, r.now, counted)
	var due func()
	if rep != nil && cfg.SMTP != config.SMTPOff {
		r.SelfCheck = &verify.SelfChecker{Watches: r.Watches, Rep: rep, Zones: cfg.Blocklists, HELO: cfg.HELO,
			Every: cfg.SelfCheckEvery, Log: r.logger, Now: r.now}
		if m, ok := p.Metrics.(interface {
			EgressCheck(egress string, c verify.EgressCheck)
		}); ok {
			r.SelfCheck.Done = m.EgressCheck
		}
		if p.CheckOnUse {
			due = r.SelfCheck.Due
		}
	}
	r.Live = Count(r.Watches.Watched(engine, due), r.metrics)
	r.Sandbox = Count(verify.NewSandbox(r.now), r.metrics)
	verdicts := p.Verdicts
	if verdicts == nil {
		verdicts, _ = p.Store.(cache.Store)
	}
	if verdicts != nil && cfg.CacheTTL > 0 {
		r.Cache = &cache.Cache{Store: verdicts, TTL: cfg.CacheTTL, Now: r.now}
		if m, ok := p.Metrics.(interface{ CacheRequest(string) }); ok {
			r.Cache.Count = m.CacheRequest
		}
	}
	r.Outcomes, _ = p.Store.(api.Outcomes)
	c, _ := p.Store.(counters)
	r.Ledger = &ledger{c: c, limits: map[api.Kept]int64{api.KeptBytes: cfg.MaxStoredBytes, api.KeptOutcomes: int64(cfg.MaxOutcomes)},
		free: p.FreeBytes, minFree: cfg.MinFreeBytes, now: r.now, log: r.logger}
	return r, nil
}

// Quota is the address quota of the configuration on the store's
// counters; a store without them (a test's) serves only without a quota.
func (r *Runtime) Quota() (api.Quota, error) {
	q := api.Quota{Limit: r.Config.QuotaAddresses, Period: r.Config.QuotaPeriod, PublishablePercent: r.Config.QuotaPublishablePercent,
		IdempotencyKeys: r.Config.MaxIdempotencyKeys}
	q.Store, _ = r.store.(api.AddressQuota)
	if q.Limit > 0 && q.Store == nil {
		return q, errors.New("app: EVS_QUOTA_ADDRESSES is set but the store keeps no quota counters")
	}
	return q, nil
}

// API returns the HTTP handlers over d, whose zero fields take the
// runtime's parts and the configuration's limits; d holds what differs
// by deployment (the queue, body limits, uploads, exports).
func (r *Runtime) API(d api.Deps) (*api.Handler, error) {
	q, err := r.Quota()
	if err != nil {
		return nil, err
	}
	if d.Engine == nil {
		d.Engine, d.Sandbox = r.Live, r.Sandbox
	}
	if d.Cache == nil && r.Cache != nil {
		d.Cache = r.Cache
	}
	if d.Idempotency == nil {
		d.Idempotency = r.keeper()
	}
	if d.Batches == nil {
		d.Batches, _ = r.store.(api.BatchStore)
	}
	d.Quota = q
	d.Ledger = cmp.Or(d.Ledger, r.Ledger)
	d.Outcomes = cmp.Or(d.Outcomes, r.Outcomes)
	d.OutcomeTTL = cmp.Or(d.OutcomeTTL, r.Config.OutcomeTTL)
	d.OutcomeShareDomains = d.OutcomeShareDomains || r.Config.OutcomeShareDomains
	d.Retention = cmp.Or(d.Retention, r.Config.Retention)
	d.MaxActiveBatches = cmp.Or(d.MaxActiveBatches, r.Config.MaxActiveBatches)
	d.BatchDeadline = cmp.Or(d.BatchDeadline, r.Config.BatchDeadline)
	d.Budgets = cmp.Or[api.Budgets](d.Budgets, r.Gate)
	d.Callbacks.Egress = cmp.Or(d.Callbacks.Egress, r.Config.Egress)
	if d.Callbacks.Deliveries == nil {
		d.Callbacks.Deliveries = r.store
	}
	if d.Now == nil {
		d.Now = r.now
	}
	d.Logger = cmp.Or(d.Logger, r.logger)
	return api.New(d), nil
}

// keeper is the Idempotency-Key keeper over the store: the local mode
// (claims in memory, one write per call) when the store can say it is the
// only server of its data (sqlitestore.OpenServing holds the directory's
// lock), else the shared mode, correct for any number of processes.
func (r *Runtime) keeper() *idempotency.Keeper {
	ex, ok := r.store.(interface{ Exclusive() bool })
	if ls, local := r.store.(idempotency.LocalStore); local && ok && ex.Exclusive() {
		return idempotency.NewLocal(ls, r.now)
	}
	return idempotency.New(r.store, r.now)
}

// Worker returns w with the runtime's engine and sandbox, and its other
// parts where w leaves them zero; the queue beneath it is the deployment's.
func (r *Runtime) Worker(w batch.Worker) *batch.Worker {
	w.Store, w.Accounts = cmp.Or[batch.Store](w.Store, r.store), cmp.Or[batch.Accounts](w.Accounts, r.store)
	// w's Processor and Polite are copied: a template may serve several
	// runtimes (a test's restarted server), each with its own engine.
	var proc batch.Processor
	if w.Processor != nil {
		proc = *w.Processor
	}
	proc.Engine, proc.Sandbox = r.Live, r.Sandbox
	if proc.Now == nil {
		proc.Now = r.now
	}
	w.Processor = &proc
	if w.Cache == nil && r.Cache != nil {
		w.Cache = r.Cache
	}
	if w.History == nil && r.Outcomes != nil {
		w.History = r.Outcomes
	}
	w.ShareDomainCounts = w.ShareDomainCounts || r.Config.OutcomeShareDomains
	w.Grey = cmp.Or[batch.GreyFacts](w.Grey, r.Facts)
	var polite batch.Polite
	if w.Polite != nil {
		polite = *w.Polite
	}
	if polite.Gate == nil {
		polite.Gate = r.Gate
	} else if polite.Gate.MX == nil {
		// A gate of the caller's (a test's) finds providers as ours does.
		polite.Gate.MX = r.Gate.MX
	}
	w.Polite = &polite
	w.Deadline = cmp.Or(w.Deadline, r.Config.BatchDeadline)
	if w.Now == nil {
		w.Now = r.now
	}
	w.Logger = cmp.Or(w.Logger, r.logger)
	if w.Fault == nil {
		w.Fault = func(error) { r.metrics.StoreError("batch") }
	}
	return &w
}
