package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/evs-dev/evs/client"
	"github.com/evs-dev/evs/internal/config"
)

// batchOptions are the flags of `evs batch`.
type batchOptions struct {
	url, mode, out, callback string
	poll                     time.Duration
}

// newBatchCmd is `evs batch`.
func newBatchCmd(c *cli) *cobra.Command {
	var o batchOptions
	cmd := &cobra.Command{
		Use:   "batch FILE.csv --url URL",
		Short: "verify a CSV file through the API (key from EVS_API_KEY)",
		Long: `Uploads FILE.csv (one address per row; the address column is found by
its header, such as email, or by its first "@") as a batch, shows a
progress bar while it runs and writes FILE.results.csv next to it: the
file's own rows, in order, with the verdict columns (evs_status, ...)
appended. The upload carries an Idempotency-Key derived from the file, the mode and the
callback, so running the command again finds the same batch.`,
		Example: `  EVS_API_KEY=evs.... evs batch list.csv --url http://127.0.0.1:8080 --mode quick`,
		Args:    argsFrom(1, 1, "one FILE.csv"),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return []string{"csv"}, cobra.ShellCompDirectiveFilterFileExt
		},
		RunE: func(_ *cobra.Command, args []string) error {
			return batchRun(c, args[0], o)
		},
	}
	cmd.Flags().StringVar(&o.url, "url", "", "base `URL` of the API, for example http://127.0.0.1:8080 (default $EVS_URL)")
	modeFlag(cmd, &o.mode, "`MODE` of the batch: quick or full")
	cmd.Flags().StringVar(&o.out, "out", "", "results `FILE` (default: FILE.results.csv next to the input)")
	cmd.Flags().DurationVar(&o.poll, "poll", time.Second, "how often to poll progress")
	cmd.Flags().StringVar(&o.callback, "callback", "", "`URL` that receives the signed event when the batch ends (https, or http inside EVS_EGRESS_ALLOW)")
	return withEnv(cmd, "EVS_API_KEY", "EVS_URL")
}

func batchRun(c *cli, file string, o batchOptions) error {
	cfg, err := config.FromEnv(c.getenv, false)
	if err != nil {
		return err
	}
	o.url = cmp.Or(o.url, cfg.APIURL)
	if o.url == "" {
		return usageErrorf("batch needs --url URL (or $EVS_URL)")
	}
	if o.mode != "quick" && o.mode != "full" {
		return usageErrorf("--mode must be quick or full, not %q", o.mode)
	}
	key := cfg.APIKey
	if key == "" {
		return errors.New("set EVS_API_KEY to your API key")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	o.out = cmp.Or(o.out, strings.TrimSuffix(file, filepath.Ext(file))+".results.csv")
	api := client.New(o.url, key)
	api.Poll = o.poll
	return batchThrough(c.ctx, api, data, o, c.stdout, c.stderr)
}

// batchThrough makes the batch of data, shows its progress on stderr
// and writes its results to o.out.
func batchThrough(ctx context.Context, api *client.Client, data []byte, o batchOptions, stdout, stderr io.Writer) error {
	// The same file and mode always carry the same key: re-running after a
	// lost reply finds the batch already made instead of making another.
	prefix := o.mode + "\n"
	if o.callback != "" {
		prefix += o.callback + "\n" // another callback is another batch
	}
	sum := sha256.Sum256(append([]byte(prefix), data...))
	b, err := api.CreateBatchCSV(ctx, data, client.BatchOptions{Mode: o.mode, CallbackURL: o.callback,
		IdempotencyKey: "evs-batch-" + hex.EncodeToString(sum[:16])})
	if err != nil {
		return fmt.Errorf("create the batch: %w", err)
	}
	fmt.Fprintf(stderr, "batch %s: %d addresses (%d duplicates)\n", b.Request.ID, b.Counters.Total, b.Counters.Duplicates)
	b, err = api.Wait(ctx, b.Request.ID, func(v client.Batch) { progress(stderr, v) })
	fmt.Fprintln(stderr)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped; the batch keeps running")
		}
		return fmt.Errorf("poll: %w", err)
	}
	if b.Request.State == "failed" {
		return fmt.Errorf("the batch failed: %s", b.Request.Error)
	}
	tmp := o.out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = api.DownloadCSV(ctx, b.Request.ID, client.Filter{}, f)
	err = cmp.Or(err, f.Close())
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("read results: %w", err)
	}
	if err := os.Rename(tmp, o.out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d deliverable, %d undeliverable, %d risky, %d unknown → %s\n", b.Request.State,
		b.Counters.Deliverable, b.Counters.Undeliverable, b.Counters.Risky, b.Counters.Unknown, o.out)
	return nil
}

// progress draws a one-line progress bar, redrawn in place.
func progress(w io.Writer, v client.Batch) {
	distinct := v.Counters.Total - v.Counters.Duplicates
	done := v.Counters.Processed
	const width = 30
	fill := 0
	if distinct > 0 {
		fill = done * width / distinct
	}
	fmt.Fprintf(w, "\r[%s%s] %d/%d %-9s", strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, distinct, v.Request.State)
}
