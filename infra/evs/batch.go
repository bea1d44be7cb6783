package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/evs-dev/evs/internal/config"
)

// batchClient talks to the API for `evs batch`.
type batchClient struct {
	base   string
	key    string
	http   *http.Client
	stderr io.Writer
	poll   time.Duration
	// callback is the batch's callbackUrl ("" for none).
	callback string
}

type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// call sends one request, retrying 429 (after Retry-After) and 5xx/network
// failures with back-off: every POST carries an Idempotency-Key, so a retry
// never creates a second batch.
func (c *batchClient) call(ctx context.Context, method, path string, header map[string]string, body []byte) (*http.Response, []byte, error) {
	var lastErr error
	for attempt := 0; attempt < 6; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("X-Api-Key", c.key)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.http.Do(req)
		var b []byte
		if err == nil {
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		wait := time.Duration(1<<attempt) * 500 * time.Millisecond
		switch {
		case err != nil:
			lastErr = err
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			lastErr = decodeAPIError(resp.StatusCode, b)
			if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
				wait = time.Duration(s) * time.Second
			}
		case resp.StatusCode >= 400:
			return resp, b, decodeAPIError(resp.StatusCode, b)
		default:
			return resp, b, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(wait):
		}
	}
	return nil, nil, fmt.Errorf("giving up after retries: %w", lastErr)
}

func decodeAPIError(status int, b []byte) error {
	var env struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
		return &apiError{Status: status, Code: env.Error.Code, Message: env.Error.Message}
	}
	return &apiError{Status: status, Code: "http_error", Message: http.StatusText(status)}
}

type batchView struct {
	Request struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Error string `json:"error"`
	} `json:"request"`
	Counters struct {
		Total, Duplicates, Processed, Deliverable, Undeliverable, Risky, Unknown int
	} `json:"counters"`
}

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
progress bar while it runs and writes FILE.results.csv next to it. The
upload carries an Idempotency-Key derived from the file, the mode and the
callback, so running the command again finds the same batch.`,
		Example: `  EVS_API_KEY=evs.... evs batch list.csv --url http://127.0.0.1:8080 --mode quick`,
		Args:    exactArgs(1, "one FILE.csv"),
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
	if o.url == "" {
		o.url = cfg.APIURL
	}
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
	if o.out == "" {
		o.out = strings.TrimSuffix(file, filepath.Ext(file)) + ".results.csv"
	}
	bc := &batchClient{base: strings.TrimRight(o.url, "/"), key: key, http: &http.Client{Timeout: 2 * time.Minute}, stderr: c.stderr, poll: o.poll, callback: o.callback}
	return bc.run(c.ctx, data, o.mode, o.out, c.stdout)
}

func (c *batchClient) run(ctx context.Context, data []byte, mode, out string, stdout io.Writer) error {
	// The same file and mode always carry the same key: re-running after a
	// lost reply finds the batch already made instead of making another.
	prefix := mode + "\n"
	if c.callback != "" {
		prefix += c.callback + "\n" // another callback is another batch
	}
	sum := sha256.Sum256(append([]byte(prefix), data...))
	idem := "evs-batch-" + hex.EncodeToString(sum[:16])
	_, b, err := c.call(ctx, http.MethodPost, "/v1/requests?"+createQuery(mode, c.callback), map[string]string{"Content-Type": "text/csv", "Idempotency-Key": idem}, data)
	if err != nil {
		return fmt.Errorf("create the batch: %w", err)
	}
	var v batchView
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("unexpected reply: %w", err)
	}
	fmt.Fprintf(c.stderr, "batch %s: %d addresses (%d duplicates)\n", v.Request.ID, v.Counters.Total, v.Counters.Duplicates)
	for {
		progress(c.stderr, v)
		if v.Request.State == "completed" || v.Request.State == "cancelled" || v.Request.State == "failed" {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(c.stderr)
			return fmt.Errorf("stopped; the batch keeps running: %s", v.Request.ID)
		case <-time.After(c.poll):
		}
		_, b, err = c.call(ctx, http.MethodGet, "/v1/requests/"+v.Request.ID, nil, nil)
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("unexpected reply: %w", err)
		}
	}
	fmt.Fprintln(c.stderr)
	if v.Request.State == "failed" {
		return fmt.Errorf("the batch failed: %s", v.Request.Error)
	}
	_, b, err = c.call(ctx, http.MethodGet, "/v1/requests/"+v.Request.ID+"/results", map[string]string{"Accept": "text/csv"}, nil)
	if err != nil {
		return fmt.Errorf("read results: %w", err)
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d deliverable, %d undeliverable, %d risky, %d unknown → %s\n", v.Request.State,
		v.Counters.Deliverable, v.Counters.Undeliverable, v.Counters.Risky, v.Counters.Unknown, out)
	return nil
}

// progress draws a one-line progress bar, redrawn in place.
func progress(w io.Writer, v batchView) {
	distinct := v.Counters.Total - v.Counters.Duplicates
	done := v.Counters.Processed
	const width = 30
	fill := 0
	if distinct > 0 {
		fill = done * width / distinct
	}
	fmt.Fprintf(w, "\r[%s%s] %d/%d %-9s", strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, distinct, v.Request.State)
}

// createQuery is the query of a CSV batch creation.
func createQuery(mode, callbackURL string) string {
	q := url.Values{"mode": {mode}}
	if callbackURL != "" {
		q.Set("callbackUrl", callbackURL)
	}
	return q.Encode()
}
