package main

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// verifyOutput is one line of `evs verify`: the API's reply shape without a
// request id.
type verifyOutput struct {
	Status   evs.Status   `json:"status"`
	Decision evs.Decision `json:"decision"`
}

// newVerifyCmd is `evs verify`.
func newVerifyCmd(c *cli) *cobra.Command {
	var (
		modeText string
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "verify ADDRESS...",
		Short: "verify addresses with the engine alone (no server): one JSON decision per line",
		Long: `Verifies each ADDRESS with the verification engine alone (no server, no key,
no store) and prints one JSON decision per line, the API's reply shape
without a request id. Live checks: real DNS and, in full mode, SMTP.`,
		Example: `  evs verify alice@example.com bob@example.org
  evs verify alice@example.com --mode quick`,
		Args: argsFrom(1, -1, "at least one ADDRESS"),
		RunE: func(_ *cobra.Command, args []string) error {
			mode, ok := evs.ParseMode(modeText)
			if !ok {
				return usageErrorf("--mode must be quick or full, not %q", modeText)
			}
			return verifyAddresses(c.ctx, args, mode, timeout, c.stdout, c.getenv)
		},
	}
	modeFlag(cmd, &modeText, "`MODE`: quick (syntax, DNS, lists, suggestion) or full (plus the SMTP mailbox probe)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "time limit per address")
	return withEnv(cmd, engineEnv...)
}

// modeFlag adds --mode (default full), completed with its two values.
func modeFlag(cmd *cobra.Command, mode *string, usage string) {
	cmd.Flags().StringVar(mode, "mode", "full", usage)
	_ = cmd.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions([]string{"quick", "full"}, cobra.ShellCompDirectiveNoFileComp))
}

func verifyAddresses(ctx context.Context, addrs []string, mode evs.Mode, timeout time.Duration, stdout io.Writer, getenv func(string) string) error {
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
	for _, addr := range addrs {
		vctx, cancel := context.WithTimeout(ctx, timeout)
		d := engine.Verify(vctx, verify.Inspect(addr), mode)
		cancel()
		if err := enc.Encode(verifyOutput{Status: d.Status(), Decision: api.Rendered(d)}); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}
