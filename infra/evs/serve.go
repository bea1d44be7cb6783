package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

func serve(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	testAccount := fs.Bool("test-account", false, "on first start, make the first account a test-mode (sandbox) account")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: serve takes no arguments", errUsage)
	}
	cfg, err := config.FromEnv(getenv, false)
	if err != nil {
		return err
	}
	logger := cfg.Logger(stderr)
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

	key, err := server.Bootstrap(ctx, st, *testAccount, time.Now())
	if err != nil {
		return fmt.Errorf("create the first account: %w", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "replies")); err == nil {
		// Left by a build that kept Idempotency-Key replies in a log of its
		// own; they now live in the database, and the old log is not read.
		logger.Warn("the replies directory in the data directory is no longer read: Idempotency-Key replies stored there (at most 24 h old) are not replayed; remove it")
	}
	if warn := cfg.CheckHELO(ctx, net.DefaultResolver.LookupHost); warn != "" {
		logger.Warn(warn)
	}
	if allow := cfg.Egress.Allowlist(); len(allow) > 0 && cfg.SMTP != config.SMTPOff {
		// Security-relevant: say at start which non-public ranges a
		// tenant's domain can make us connect to.
		logger.Info("SMTP probes may reach these non-public ranges (EVS_EGRESS_ALLOW)", "allow", fmt.Sprint(allow))
	}
	opts := server.Options{Config: cfg, Store: st, Logger: logger}
	if cfg.MetricsAddr != "" {
		m := server.NewPrometheus(func(ctx context.Context) (int, error) { return server.PendingAddresses(ctx, st) })
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("listen on %s (EVS_METRICS_ADDR): %w", cfg.MetricsAddr, err)
		}
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
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s (EVS_ADDR): %w", cfg.Addr, err)
	}
	base := "http://" + ln.Addr().String()
	if key != "" {
		kind := "live"
		example := "alice@example.com"
		if *testAccount {
			kind = "test-mode (sandbox: no network; the local part picks the outcome)"
			example = "alice+rejected_email@example.com"
		}
		fmt.Fprintf(stdout, `
First start: created a %s account and its API key. It is shown only now:

  export EVS_API_KEY=%s

Try it:

  curl -s %s/v1/verify -H "X-Api-Key: $EVS_API_KEY" -H 'Content-Type: application/json' -d '{"email":"%s"}'

`, kind, key, base, example)
	}
	fmt.Fprintf(stdout, "evs %s listening on %s (data in %s, SMTP %s)\n", version, base, cfg.DataDir, cfg.SMTP)
	return srv.Serve(ctx, ln)
}
