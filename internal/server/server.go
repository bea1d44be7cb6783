// Package server is `evs serve`: the whole API on one machine. Its HTTP edge
// (edge.go) runs as middleware what API Gateway does on AWS in front of the
// same handlers the Lambda functions run; behind them are the embedded
// store, an in-process batch worker and the webhook deliverer.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/evs-dev/evs/internal/api"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/webhook"
	"github.com/google/uuid"
	"golang.org/x/net/netutil"
)

// Store is the embedded store: the service's store plus the periodic sweep
// that plays DynamoDB TTL's part.
type Store interface {
	store.Store
	store.DueDeliveries
	Sweep(ctx context.Context) (int, error)
}

// stateChanges is a store that tells of each batch state it writes
// (sqlitestore.Store.OnStateChange).
type stateChanges interface {
	OnStateChange(fn func(b evs.Batch, from evs.State))
}

// Engine verifies single addresses (the API) and groups of addresses of
// one domain (the batch worker); *verify.Engine is one.
type Engine interface {
	api.Verifier
	batch.Verifier
}

// Options configure a server.
type Options struct {
	Config config.Config
	Store  Store
	Engine Engine // for live accounts (default: built from Config)
	// Worker tunes the batch worker (app.Runtime.Worker fills the rest)
	// and Batch its lanes; zero values take defaults.
	Worker     batch.Worker
	Batch      batch.LocalConfig
	Now        func() time.Time
	Logger     *slog.Logger
	SweepEvery time.Duration // how often expired records are deleted (default 1 h)
	// BodyTimeout is how long a request body may take to arrive once its
	// headers are in (default 30 s); then the connection is closed.
	BodyTimeout time.Duration
	// HeavyReads bounds the heavy reads run at once, each holding one of
	// the store's readers (default 3).
	HeavyReads int
	// UploadWindow is the window of an upload PUT's minimum rate,
	// UploadMinRate (default 10 s).
	UploadWindow time.Duration
	// BodyBudget and BodyWait configure the budget of large request
	// bodies (bodygate.go).
	BodyBudget         int64
	BodyWait           time.Duration
	DeliverEvery       time.Duration // how often due webhook deliveries are looked for (default 500 ms)
	MaxUploadAddresses int           // 0: the contract's; tests lower it
	Metrics            app.Observer  // EVS_METRICS_ADDR
	TLS                *Certificate  // EVS_TLS_CERT, EVS_TLS_KEY
	// Exits is the dialer over the SOCKS exits (EVS_SMTP=proxy), made
	// from Config when nil; a test that gives Engine gives its Exits.
	Exits          *verify.Exits
	SelfCheckEvery time.Duration // of the egress self-check (default 1 h; egress.go)
	// FreeBytes reads the free space of the data directory's file system
	// (disk.go). Default: that of Config.DataDir, when set.
	FreeBytes func() (uint64, error)
	SNS       SNSOptions // POST /v1/outcomes/sns (sns.go)

	sns *snsEndpoint // made by New when the store keeps outcomes and webhook secrets
}

// HTTP limits of `evs serve`.
const (
	MaxHeaderBytes = 16 << 10 // a request's line and headers together
	headerTimeout  = 10 * time.Second
	idleTimeout    = 120 * time.Second
	// defaultHeavyReads: one fewer than the SQLite store's smallest pool of
	// readers (4), so that heavy reads never hold them all.
	defaultHeavyReads = 3
	defaultMaxConns   = 1024 // EVS_MAX_CONNS's default
)

// MetricsLimits are the timeouts of the metrics listener; a zero value
// takes its default.
type MetricsLimits struct {
	// ReadHeader bounds the arrival of a request's headers (default 10 s,
	// as on the API listener); Read the whole request, which has no body
	// (default 10 s).
	ReadHeader, Read time.Duration
	// Write bounds a reply's writing (default 30 s).
	Write time.Duration
	// Idle closes a kept-alive connection with no request (default 120 s,
	// as on the API listener).
	Idle time.Duration
}

// MetricsServer returns the HTTP server of the metrics listener
// (EVS_METRICS_ADDR) serving h, with the API listener's limits and bounds
// on reading a request and writing a reply.
func MetricsServer(h http.Handler, logger *slog.Logger, l MetricsLimits) *http.Server {
	logger = cmp.Or(logger, slog.Default())
	def := func(d, v time.Duration) time.Duration { return cmp.Or(max(d, 0), v) }
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: def(l.ReadHeader, headerTimeout),
		ReadTimeout:       def(l.Read, headerTimeout),
		WriteTimeout:      def(l.Write, 30*time.Second),
		IdleTimeout:       def(l.Idle, idleTimeout),
		MaxHeaderBytes:    MaxHeaderBytes - 4096,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// Server is the one-machine service.
type Server struct {
	opts    Options
	rt      *app.Runtime
	edge    *edge
	batches *batch.LocalQueue
	hooks   *webhook.Deliverer
}

// New assembles a server: the runtime, built by app.Build as on AWS, over
// the embedded store and this process's memory, behind evs serve's edge.
func New(o Options) (*Server, error) {
	if o.Store == nil {
		return nil, errors.New("server: a store is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Logger = cmp.Or(o.Logger, slog.Default())
	o.SweepEvery = cmp.Or(max(o.SweepEvery, 0), time.Hour)
	if o.FreeBytes == nil && o.Config.DataDir != "" {
		dir := o.Config.DataDir
		o.FreeBytes = func() (uint64, error) { return freeBytes(dir) }
	}
	if p, ok := o.Metrics.(*Prometheus); ok && o.FreeBytes != nil {
		p.watchDisk(o.FreeBytes, o.Config.MinFreeBytes)
	}
	if sc, ok := o.Store.(stateChanges); ok {
		sc.OnStateChange((&batchLog{logger: o.Logger, tenths: map[string]int{}}).written)
	}
	if w, ok := o.Store.(interface{ Warnings() []string }); ok { // security-relevant: said at start
		for _, msg := range w.Warnings() {
			o.Logger.Warn(msg)
		}
	}
	cfg := o.Config
	cfg.SelfCheckEvery = cmp.Or(o.SelfCheckEvery, cfg.SelfCheckEvery)
	// CheckOnUse: a store whose accounts were all sandboxes at start
	// checks its egress at the first live probe (Serve).
	ports := app.Ports{Store: o.Store, Now: o.Now, Logger: o.Logger, Exits: o.Exits, FreeBytes: o.FreeBytes, Engine: o.Engine, Metrics: o.Metrics, CheckOnUse: true}
	if st, ok := o.Store.(cache.Store); ok { // this process is the store's only writer
		ports.Verdicts = cache.NewVerdictMemory(st, 0)
	}
	rt, err := app.Build(cfg, ports)
	if err != nil {
		return nil, err
	}
	worker := rt.Worker(o.Worker)
	lanes := o.Batch
	if lanes.Idle == nil {
		// A big batch leaves tens of MB of garbage the runtime would keep
		// for minutes.
		lanes.Idle = debug.FreeOSMemory
	}
	batches, err := batch.NewLocalQueue(o.Store, worker, lanes)
	if err != nil {
		return nil, err
	}
	watch := newEgressWatches(rt.Watches)
	if p, ok := o.Metrics.(*Prometheus); ok {
		p.reg.MustRegister(watch)
	}
	uploads, _ := o.Store.(uploadStore)
	links, _ := o.Store.(exportStore)
	bodies := newBodyGate(o.BodyBudget, o.BodyWait)
	h, err := rt.API(api.Deps{
		AdmitList:          bodies.admitList,
		Uploads:            uploads,
		ChargeUploads:      uploads != nil,
		ExportLinks:        links,
		HeavyReads:         cmp.Or(o.HeavyReads, defaultHeavyReads),
		PublicURL:          o.Config.PublicURL,
		MaxUploadAddresses: o.MaxUploadAddresses,
		Queue:              batches,
	})
	if err != nil {
		return nil, err
	}
	o.sns = newSNSEndpoint(o, rt.Outcomes, rt.Ledger)
	gw := newEdge(o, h.MountAll, authorizer.New(o.Store), bodies)
	gw.egress = watch
	gw.ledger = rt.Ledger
	o.DeliverEvery = cmp.Or(max(o.DeliverEvery, 0), 500*time.Millisecond)
	hooks := &webhook.Deliverer{Store: o.Store, Client: webhook.NewClient(o.Config.Egress), Now: o.Now, Logger: o.Logger, Body: api.EventBody}
	if o.Metrics != nil {
		hooks.Observe = o.Metrics.WebhookDelivery
	}
	return &Server{opts: o, rt: rt, edge: gw, batches: batches, hooks: hooks}, nil
}

// PendingAddresses counts the addresses of queued and running batches
// without a result yet (evs_batch_addresses_pending).
func PendingAddresses(ctx context.Context, st interface {
	UnfinishedBatches(ctx context.Context) ([]evs.Batch, error)
}) (int, error) {
	bs, err := st.UnfinishedBatches(ctx)
	n := 0
	for _, b := range bs {
		n += b.Counters.Total - b.Counters.Duplicates - b.Counters.Processed
	}
	return n, err
}

// probes tells whether the store has an account whose calls may probe (a
// live one): only then is the egress checked and its findings logged.
func (s *Server) probes(ctx context.Context) bool {
	st, ok := s.opts.Store.(interface {
		HasLiveAccount(context.Context) (bool, error)
	})
	if !ok {
		return true
	}
	live, err := st.HasLiveAccount(ctx)
	return live || err != nil
}

// Serve serves on ln until ctx is done, then drains (drain.go): /readyz
// turns 503, the calls in flight finish (up to Config.DrainTimeout), and
// the batch worker stops, to resume at the next start.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	if err := s.batches.Start(workCtx); err != nil {
		return err
	}
	go runEvery(workCtx, s.opts.SweepEvery, s.sweep)
	if c := s.rt.SelfCheck; c != nil && s.probes(ctx) {
		go runEvery(workCtx, cmp.Or(s.rt.Config.SelfCheckEvery, verify.SelfCheckEvery), c.Run)
	}
	if s.rt.Exits != nil {
		go s.rt.Exits.Run(workCtx, exitProbeEvery)
	}
	hooksDone := make(chan struct{})
	go func() {
		defer close(hooksDone)
		s.hooks.Run(workCtx, s.opts.Store, s.opts.DeliverEvery)
	}()
	defer func() { stopWork(); <-hooksDone }()
	srv := &http.Server{
		Handler:           s.edge,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		// net/http allows 4096 bytes of slack: the limit is the contract's.
		MaxHeaderBytes: MaxHeaderBytes - 4096,
		ErrorLog:       slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn),
		ConnContext:    connContext, // framing.go
	}
	maxConns := cmp.Or(max(s.opts.Config.MaxConns, 0), defaultMaxConns)
	// Past the cap, connections wait in the kernel's accept queue.
	ln = netutil.LimitListener(ln, maxConns)
	ln = newClientListener(ln, perClientShare(maxConns), s.opts.Config.TrustedProxies)
	if s.opts.TLS != nil { // under the framing watch, which must see the plain bytes
		ln = tls.NewListener(ln, s.opts.TLS.TLSConfig())
	}
	ln = framingListener{ln}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		err = s.drain(srv)
	}
	stopWork()
	s.batches.Wait()
	return err
}

func (s *Server) sweep(ctx context.Context) {
	if n, err := s.opts.Store.Sweep(ctx); err != nil && ctx.Err() == nil {
		s.opts.Logger.Warn("sweep failed", slog.String("error", err.Error()))
	} else if n > 0 {
		s.opts.Logger.Info("swept expired records", slog.Int("count", n))
	}
}

// Bootstrap creates the first account and its key on an empty store and
// returns the key, which is shown once and never stored. On a store that
// already has accounts it returns "".
func Bootstrap(ctx context.Context, st store.Keys, test bool, now time.Time) (string, error) {
	n, err := st.CountAccounts(ctx)
	if err != nil || n > 0 {
		return "", err
	}
	name := "default"
	if test {
		name = "sandbox"
	}
	a := evs.Account{ID: uuid.NewString(), Name: name, Test: test, CreatedAt: now.UTC()}
	if err := st.CreateAccount(ctx, a); err != nil {
		return "", err
	}
	return authorizer.IssueKey(ctx, st, a.ID, "", now)
}
