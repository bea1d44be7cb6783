package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Verify verifies one address; mode is "full" or "quick" ("" is the
// service's default, full).
func (c *Client) Verify(ctx context.Context, email, mode string) (*VerifyResult, error) {
	body, err := json.Marshal(struct {
		Email string `json:"email"`
		Mode  string `json:"mode,omitempty"`
	}{email, mode})
	if err != nil {
		return nil, err
	}
	_, b, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/verify",
		header: map[string]string{"Content-Type": "application/json"}, body: body})
	if err != nil {
		return nil, err
	}
	var v VerifyResult
	return &v, c.decode(b, &v)
}

// BatchOptions are a batch's optional fields.
type BatchOptions struct {
	Mode        string // "full" (the default) or "quick"
	Name        string // a label shown in listings and the console
	CallbackURL string // receives the signed event when the batch ends
	// Column and Delimiter say where a CSV list's addresses are; found
	// when empty.
	Column    string
	Delimiter string
	// IdempotencyKey makes creation safe to repeat across runs (the same
	// key and list find the batch made before); a random one is used
	// when empty, which protects the call's own retries. A list sent
	// through an upload does not use it: the upload makes one batch
	// whatever is retried, and another run sends another upload.
	IdempotencyKey string
}

// CreateBatch makes a batch of emails.
func (c *Client) CreateBatch(ctx context.Context, emails []string, o BatchOptions) (*Batch, error) {
	if o.Column != "" || o.Delimiter != "" {
		return nil, errors.New("evs: Column and Delimiter are for CSV lists")
	}
	body, err := json.Marshal(struct {
		Emails      []string `json:"emails"`
		Mode        string   `json:"mode,omitempty"`
		Name        string   `json:"name,omitempty"`
		CallbackURL string   `json:"callbackUrl,omitempty"`
	}{emails, o.Mode, o.Name, o.CallbackURL})
	if err != nil {
		return nil, err
	}
	return c.create(ctx, "/v1/requests", "application/json", body, o.IdempotencyKey)
}

// CreateBatchCSV makes a batch of a CSV list (or one address a line).
// A list over the client's MaxBody is sent to an upload URL first, then
// the batch is made from it (up to 1,000,000 addresses, 100 MiB).
func (c *Client) CreateBatchCSV(ctx context.Context, list []byte, o BatchOptions) (*Batch, error) {
	if len(list) <= c.MaxBody {
		q := url.Values{}
		set := func(k, v string) {
			if v != "" {
				q.Set(k, v)
			}
		}
		set("mode", o.Mode)
		set("name", o.Name)
		set("callbackUrl", o.CallbackURL)
		set("column", o.Column)
		set("delimiter", o.Delimiter)
		path := "/v1/requests"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		return c.create(ctx, path, "text/csv", list, o.IdempotencyKey)
	}
	id, err := c.upload(ctx, list)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(struct {
		UploadID    string `json:"uploadId"`
		Mode        string `json:"mode,omitempty"`
		Name        string `json:"name,omitempty"`
		CallbackURL string `json:"callbackUrl,omitempty"`
		Column      string `json:"column,omitempty"`
		Delimiter   string `json:"delimiter,omitempty"`
	}{id, o.Mode, o.Name, o.CallbackURL, o.Column, o.Delimiter})
	if err != nil {
		return nil, err
	}
	// An upload makes one batch whatever is retried; the run's key would
	// be refused with another upload's body.
	return c.create(ctx, "/v1/requests", "application/json", body, "")
}

func (c *Client) create(ctx context.Context, path, contentType string, body []byte, key string) (*Batch, error) {
	h := map[string]string{"Content-Type": contentType}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	_, b, err := c.do(ctx, request{method: http.MethodPost, path: path, header: h, body: body})
	if err != nil {
		return nil, err
	}
	var bt Batch
	return &bt, c.decode(b, &bt)
}

// upload sends a CSV list to a new upload's URL and returns its id.
func (c *Client) upload(ctx context.Context, list []byte) (string, error) {
	_, b, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/uploads",
		header: map[string]string{"Content-Type": "application/json"}, body: []byte(`{"contentType":"text/csv"}`)})
	if err != nil {
		return "", err
	}
	var u struct {
		UploadID  string `json:"uploadId"`
		URL       string `json:"url"`
		Method    string `json:"method"`
		ExpiresAt string `json:"expiresAt"`
		MaxBytes  int64  `json:"maxBytes"`
		RequestID string `json:"requestId"`
	}
	if err := c.decode(b, &u); err != nil {
		return "", err
	}
	if int64(len(list)) > u.MaxBytes {
		return "", fmt.Errorf("evs: the list is %d bytes, more than an upload takes (%d)", len(list), u.MaxBytes)
	}
	// The URL is the credential (S3 pre-signed, or the server's own with
	// its token): no key is sent with it.
	if _, _, err := c.do(ctx, request{method: u.Method, path: u.URL, header: map[string]string{"Content-Type": "text/csv"}, body: list}); err != nil {
		return "", fmt.Errorf("evs: send the list: %w", err)
	}
	return u.UploadID, nil
}

// Batch reads a batch.
func (c *Client) Batch(ctx context.Context, id string) (*Batch, error) {
	_, b, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/requests/" + url.PathEscape(id)})
	if err != nil {
		return nil, err
	}
	var bt Batch
	return &bt, c.decode(b, &bt)
}

// Wait polls the batch every Poll until it is final and returns it;
// progress, when not nil, is called with each state read.
func (c *Client) Wait(ctx context.Context, id string, progress func(Batch)) (*Batch, error) {
	poll := c.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	for {
		b, err := c.Batch(ctx, id)
		if err != nil {
			return nil, err
		}
		if progress != nil {
			progress(*b)
		}
		if b.Final() {
			return b, nil
		}
		if err := sleep(ctx, poll); err != nil {
			return nil, err
		}
	}
}

// Filter narrows a batch's results; the zero value keeps all.
type Filter struct {
	Status   string // comma-separated statuses, e.g. "deliverable,risky"
	Reason   string // comma-separated reasons
	MinScore int    // 0 for none
}

func (f Filter) query() url.Values {
	q := url.Values{}
	if f.Status != "" {
		q.Set("status", f.Status)
	}
	if f.Reason != "" {
		q.Set("reason", f.Reason)
	}
	if f.MinScore > 0 {
		q.Set("minScore", strconv.Itoa(f.MinScore))
	}
	return q
}

// Results yields the batch's written results in submission order, a page
// of 1,000 at a time; it stops at the first error, which it yields.
func (c *Client) Results(ctx context.Context, id string, f Filter) iter.Seq2[Result, error] {
	q := f.query()
	q.Set("limit", "1000")
	return pages[Result](ctx, c, "/v1/requests/"+url.PathEscape(id)+"/results", "results", q)
}

// Batches yields the account's batches, newest first, a page of 1,000 at
// a time; states, when given, keeps only batches in those states
// ("queued", "running", "completed", "cancelled", "failed"). It stops at
// the first error, which it yields.
func (c *Client) Batches(ctx context.Context, states ...string) iter.Seq2[Batch, error] {
	q := url.Values{"limit": {"1000"}}
	if len(states) > 0 {
		q.Set("state", strings.Join(states, ","))
	}
	return pages[Batch](ctx, c, "/v1/requests", "requests", q)
}

// Cancel cancels a batch that is not final yet and returns it; a final
// batch is an *Error with Code "invalid_state".
func (c *Client) Cancel(ctx context.Context, id string) (*Batch, error) {
	_, b, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/requests/" + url.PathEscape(id) + "/cancel"})
	if err != nil {
		return nil, err
	}
	var bt Batch
	return &bt, c.decode(b, &bt)
}

// pages yields the items of a paged list (items under field, nextCursor
// to go on) from path with q, following cursors until the last page.
func pages[T any](ctx context.Context, c *Client, path, field string, q url.Values) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		for {
			_, b, err := c.do(ctx, request{method: http.MethodGet, path: path + "?" + q.Encode()})
			if err != nil {
				yield(zero, err)
				return
			}
			var page map[string]json.RawMessage
			if err := json.Unmarshal(b, &page); err != nil {
				yield(zero, fmt.Errorf("evs: unexpected reply: %w", err))
				return
			}
			var items []T
			var next *string
			if err := c.decode(page[field], &items); err != nil {
				yield(zero, err)
				return
			}
			if err := json.Unmarshal(page["nextCursor"], &next); err != nil {
				yield(zero, fmt.Errorf("evs: unexpected reply: %w", err))
				return
			}
			for k := range page {
				if c.strict && k != field && k != "nextCursor" && k != "requestId" {
					yield(zero, fmt.Errorf("evs: unexpected reply: unknown field %q", k))
					return
				}
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == nil {
				return
			}
			q.Set("cursor", *next)
		}
	}
}

// DownloadCSV writes the batch's results as CSV to w, as they arrive:
// streamed by `evs serve`; for a long list on AWS written to an export
// file first (202 while it is written, then 303 to it), which it waits for
// and fetches without the key.
func (c *Client) DownloadCSV(ctx context.Context, id string, f Filter, w io.Writer) error {
	path := "/v1/requests/" + url.PathEscape(id) + "/results"
	if q := f.query(); len(q) > 0 {
		path += "?" + q.Encode()
	}
	for {
		resp, _, err := c.do(ctx, request{method: http.MethodGet, path: path, sink: w, noFollow: true,
			header: map[string]string{"Accept": "text/csv"}, accept: []int{http.StatusAccepted, http.StatusSeeOther}})
		if err != nil {
			return err
		}
		switch resp.StatusCode {
		case http.StatusOK:
			return nil
		case http.StatusSeeOther:
			to, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
			if err != nil {
				return fmt.Errorf("evs: the export's location: %w", err)
			}
			_, _, err = c.do(ctx, request{method: http.MethodGet, path: to.String(), sink: w})
			return err
		}
		wait := c.Poll
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}
