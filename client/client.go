// Package client calls the evs API (`evs serve` or the AWS stack) for the
// jobs users have: verify one address; send a list, follow it to the end
// and download its results.
//
// It is written by hand, on the standard library alone, rather than
// generated from api/openapi.yaml: a generated client brings a runtime
// module and leaves the jobs (retrying safely, uploading a large list,
// polling, following an export) to every caller. Its types follow the
// contract; its tests decode every reply of a real `evs serve` strictly,
// so a field the contract adds and the client lacks fails them.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Client calls one evs API with one key. Its zero value is not usable:
// make one with New.
type Client struct {
	base string
	key  string
	// HTTP sends the requests; New sets one with a 2-minute timeout.
	HTTP *http.Client
	// Retries is how many times a call refused for now (429, 5xx, or a
	// network failure) is tried again, after Retry-After or a back-off.
	// Every POST carries an Idempotency-Key, so a retry never does the
	// work twice.
	Retries int
	// Poll is how often Wait asks for a batch's state (default 2 s).
	Poll time.Duration
	// MaxBody is the largest CSV list CreateBatchCSV sends as a request
	// body (default 4 MiB, the contract's limit on AWS); a longer one goes
	// through an upload.
	MaxBody int
	// strict makes replies with a field the client does not know an
	// error: the tests' guard against drift from the contract.
	strict bool
}

// New returns a client of the API at baseURL (e.g. "http://127.0.0.1:8080")
// sending apiKey.
func New(baseURL, apiKey string) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), key: apiKey,
		HTTP: &http.Client{Timeout: 2 * time.Minute}, Retries: 5, Poll: 2 * time.Second, MaxBody: 4 << 20}
}

// Error is an error reply of the API (its error envelope).
type Error struct {
	Status    int
	Code      string // the contract's error code, e.g. "invalid_request"
	Message   string
	RequestID string
	// RetryAfter is the reply's Retry-After, when it had one.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("evs: %d %s: %s (request %s)", e.Status, e.Code, e.Message, e.RequestID)
}

// request is one call: its body is re-sent on a retry.
type request struct {
	method, path string
	header       map[string]string
	body         []byte
	// accept are the statuses that are not errors (default 2xx).
	accept []int
	// sink, when set, receives a 200's body as it arrives instead of the
	// body being read into memory.
	sink io.Writer
	// noFollow answers a redirect rather than following it.
	noFollow bool
}

// errCut is a body cut after part of it went to a sink: not retried, since
// the sink holds the part.
type errCut struct{ err error }

func (e errCut) Error() string { return "evs: the reply was cut: " + e.err.Error() }
func (e errCut) Unwrap() error { return e.err }

// do sends r, retrying what the API refused for now, and returns the
// reply whose status r accepts, its body read, or an *Error.
func (c *Client) do(ctx context.Context, r request) (*http.Response, []byte, error) {
	if r.method == http.MethodPost && r.header["Idempotency-Key"] == "" {
		if r.header == nil {
			r.header = map[string]string{}
		}
		r.header["Idempotency-Key"] = newKey()
	}
	var last error
	for attempt := 0; ; attempt++ {
		resp, b, err := c.once(ctx, r)
		wait := time.Duration(1<<min(attempt, 5)) * 500 * time.Millisecond
		var apiErr *Error
		var cut errCut
		switch {
		case err == nil:
			return resp, b, nil
		case errors.As(err, &cut):
			return nil, nil, err
		case errors.As(err, &apiErr):
			if apiErr.Status != http.StatusTooManyRequests && apiErr.Status < 500 {
				return nil, nil, err
			}
			if apiErr.RetryAfter > 0 {
				wait = apiErr.RetryAfter
			}
		case ctx.Err() != nil:
			return nil, nil, ctx.Err()
		}
		last = err
		if attempt >= c.Retries {
			return nil, nil, last
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, nil, err
		}
	}
}

func (c *Client) once(ctx context.Context, r request) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, r.method, c.url(r.path), bytes.NewReader(r.body))
	if err != nil {
		return nil, nil, err
	}
	if !strings.HasPrefix(r.path, "http") {
		req.Header.Set("X-Api-Key", c.key) // never to another host
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	hc := c.HTTP
	if r.noFollow {
		nf := *c.HTTP
		nf.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		hc = &nf
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	for _, s := range r.accept {
		ok = ok || resp.StatusCode == s
	}
	if ok && r.sink != nil && resp.StatusCode == http.StatusOK {
		if n, err := io.Copy(r.sink, resp.Body); err != nil {
			if n == 0 {
				return nil, nil, err
			}
			return nil, nil, errCut{err}
		}
		return resp, nil, nil
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, apiError(resp, b)
	}
	return resp, b, nil
}

func (c *Client) url(path string) string {
	if strings.HasPrefix(path, "http://") || strings.HasPrefix(path, "https://") {
		return path
	}
	return c.base + path
}

// apiError reads an error reply.
func apiError(resp *http.Response, b []byte) error {
	e := &Error{Status: resp.StatusCode, Code: "http_error", Message: http.StatusText(resp.StatusCode)}
	var env struct {
		Error struct{ Code, Message, RequestID string } `json:"error"`
	}
	if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
		e.Code, e.Message, e.RequestID = env.Error.Code, env.Error.Message, env.Error.RequestID
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// decode reads a JSON reply into v.
func (c *Client) decode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	if c.strict {
		d.DisallowUnknownFields()
	}
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("evs: unexpected reply: %w", err)
	}
	return nil
}

func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "evs-client-" + hex.EncodeToString(b[:])
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
