package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// verifyOutput is one line of `evs verify`: the API's reply shape without a
// request id.
type verifyOutput struct {
	Status   evs.Status   `json:"status"`
	Decision api.Decision `json:"decision"`
}

func verifyCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modeText := fs.String("mode", "full", "quick (syntax, DNS, lists, suggestion) or full (plus the SMTP mailbox probe)")
	timeout := fs.Duration("timeout", 30*time.Second, "time limit per address")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	mode, ok := evs.ParseMode(*modeText)
	if !ok {
		return fmt.Errorf("%w: --mode must be quick or full", errUsage)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: verify [--mode quick|full] ADDRESS [ADDRESS ...]", errUsage)
	}
	cfg, err := config.FromEnv(getenv, false)
	if err != nil {
		return err
	}
	engine, _, err := verify.Build(cfg)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for _, addr := range fs.Args() {
		vctx, cancel := context.WithTimeout(ctx, *timeout)
		d := engine.Verify(vctx, addr, mode)
		cancel()
		if err := enc.Encode(verifyOutput{Status: d.Status(), Decision: api.NewDecision(d)}); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}
