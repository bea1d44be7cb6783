package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

// newServeCmd is `evs serve`.
func newServeCmd(c *cli) *cobra.Command {
	var testAccount bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run the whole API on this machine",
		Long: `Runs the whole API on this machine: the key lookup, throttle and limits as
middleware in front of the same handlers the Lambda functions run, the
embedded store in EVS_DATA_DIR and an in-process batch worker.

On first start with an empty store it creates an account and one key, and
prints the key once.

GET /healthz says it is alive, GET /readyz that it takes work. SIGTERM
drains: /readyz answers 503 at once and calls in flight finish (up to
EVS_DRAIN_TIMEOUT). SIGHUP re-reads EVS_TLS_CERT and EVS_TLS_KEY.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(c.ctx, testAccount, c.stdout, c.stderr, c.getenv, c.unknownEnv())
		},
	}
	cmd.Flags().BoolVar(&testAccount, "test-account", false, "on first start, make the first account a test-mode (sandbox) account")
	return withEnv(cmd, append([]string{"EVS_ADDR", "EVS_DATA_DIR", "EVS_RATE_LIMIT", "EVS_AUTH_TTL", "EVS_RETENTION_DAYS",
		"EVS_LOG_LEVEL", "EVS_MAX_ACTIVE_BATCHES", "EVS_BATCH_DEADLINE", "EVS_CACHE_TTL", "EVS_OUTCOME_TTL", "EVS_OUTCOME_SHARE_DOMAINS", "EVS_SNS_TOPICS", "EVS_QUOTA_ADDRESSES", "EVS_QUOTA_PERIOD", "EVS_QUOTA_PUBLISHABLE_PERCENT",
		"EVS_PUBLISHABLE_RATE", "EVS_PUBLISHABLE_RATE_PER_ADDRESS", "EVS_MAX_CONNS", "EVS_METRICS_ADDR", "EVS_PUBLIC_URL", "EVS_MIN_FREE_BYTES", "EVS_PROVIDER_SESSIONS", "EVS_PROVIDER_RCPT_PER_MIN",
		"EVS_TRUSTED_PROXIES", "EVS_DRAIN_TIMEOUT", "EVS_TLS_CERT", "EVS_TLS_KEY",
		"EVS_MAX_STORED_BYTES", "EVS_MAX_OUTCOMES", "EVS_MAX_IDEMPOTENCY_KEYS", "EVS_SMTP_EGRESS_IP", "EVS_BLOCKLISTS", "EVS_SELFCHECK_EVERY"}, engineEnv...)...)
}

// serveMemoryLimit is evs serve's soft memory limit unless GOMEMLIMIT sets
// one: without it a million-address batch (~200 MiB live) grew the process
// past 500 MB. It is not a cap: more live data still fits, at a higher
// collection cost.
const serveMemoryLimit = 384 << 20

func serve(ctx context.Context, testAccount bool, stdout, stderr io.Writer, getenv func(string) string, unknownEnv []string) error {
	cfg, err := config.FromEnv(getenv, false)
	if err != nil {
		return err
	}
	logger := cfg.Logger(stderr)
	for _, w := range unknownEnv {
		logger.Warn(w)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(serveMemoryLimit)
	}
	cert, stopTLS, err := serveTLS(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer stopTLS()
	// The listeners come first: a port in use must stop the start before
	// anything is made, above all the first account, whose key is shown
	// only once.
	ln, err := listen(cfg.Addr, "EVS_ADDR")
	if err != nil {
		return err
	}
	defer ln.Close()
	var mln net.Listener
	if cfg.MetricsAddr != "" {
		if mln, err = listen(cfg.MetricsAddr, "EVS_METRICS_ADDR"); err != nil {
			return err
		}
		defer mln.Close()
	}
	// The serve lock makes this process the directory's only server, which
	// lets idempotent calls keep their claims in memory.
	st, err := sqlitestore.OpenServing(ctx, cfg.DataDir, time.Now)
	if errors.Is(err, sqlitestore.ErrInUse) {
		return err // one line that names the directory already
	}
	if err != nil {
		return fmt.Errorf("open the store in %s: %w", cfg.DataDir, err)
	}
	defer st.Close()

	if _, err := os.Stat(filepath.Join(cfg.DataDir, "replies")); err == nil {
		// Left by a build that kept Idempotency-Key replies in a log of its
		// own; they now live in the database, and the old log is not read.
		logger.Warn("the replies directory in the data directory is no longer read: Idempotency-Key replies stored there (at most 24 h old) are not replayed; remove it")
	}
	if allow := cfg.Egress.Allowlist(); len(allow) > 0 && cfg.SMTP != config.SMTPOff {
		// Security-relevant: say at start which non-public ranges a
		// tenant's domain can make us connect to.
		logger.Info("SMTP probes may reach these non-public ranges (EVS_EGRESS_ALLOW)", "allow", fmt.Sprint(allow))
	}
	opts := server.Options{Config: cfg, Store: st, Logger: logger, TLS: cert}
	if mln != nil {
		m := server.NewPrometheus(func(ctx context.Context) (int, error) { return server.PendingAddresses(ctx, st) })
		m.BuildInfo(config.ReadBuildInfo(version))
		msrv := server.MetricsServer(m.Handler(), logger, server.MetricsLimits{})
		go func() { _ = msrv.Serve(mln) }()
		defer msrv.Close()
		fmt.Fprintf(stdout, "metrics on http://%s/metrics\n", mln.Addr())
		opts.Metrics = m
	}
	srv, err := server.New(opts)
	if err != nil {
		return err
	}
	// Last before serving: nothing that can still fail stands between
	// making the key and printing it.
	key, err := server.Bootstrap(ctx, st, testAccount, time.Now())
	if err != nil {
		return fmt.Errorf("create the first account: %w", err)
	}
	base := "http://" + ln.Addr().String()
	if cert != nil {
		base = "https://" + ln.Addr().String()
	}
	if key != "" {
		if err := showFirstKey(stdout, logger, cfg.DataDir, key, testAccount, base); err != nil {
			return err
		}
	} else {
		// Keys are shown only when made: say how to make one, for whoever
		// lost the first one or never saw it.
		logger.Info("no API key printed: the data directory already has accounts; make a key with: " + keysCreateHint(getenv))
	}
	fmt.Fprintf(stdout, "evs %s listening on %s (data in %s, SMTP %s)\n", config.ReadBuildInfo(version).Version, base, cfg.DataDir, cfg.SMTP)
	fmt.Fprintf(stdout, "web console: %s%s\n", base, api.ConsolePath)
	fmt.Fprintf(stdout, "sign-up widget: %s%s (with a publishable key: evs keys create --publishable)\n", base, api.WidgetPath)
	return srv.Serve(ctx, ln)
}

// listen listens on addr, the value of variable; an address in use is one
// line that says what to do.
func listen(addr, variable string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("cannot listen on %s (%s): another program is using it; stop that program, or set %s to a free address", addr, variable, variable)
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s (%s): %w", addr, variable, err)
	}
	return ln, nil
}

// keysCreateHint is the command that makes a test key for the data
// directory this server uses.
func keysCreateHint(getenv func(string) string) string {
	hint := "evs keys create --account sandbox --test"
	if dir := getenv("EVS_DATA_DIR"); dir != "" {
		if strings.ContainsAny(dir, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
			dir = "'" + strings.ReplaceAll(dir, "'", `'\''`) + "'"
		}
		hint = "EVS_DATA_DIR=" + dir + " " + hint
	}
	return hint
}
