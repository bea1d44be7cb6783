package webhook

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
)

// Schedule is the delay before each retry after a failed attempt (the
// first retry 5 s after the first attempt); after the last, delivery is
// given up.
var Schedule = []time.Duration{
	5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour,
}

// TestDelay replaces every retry delay for test-mode accounts (contract,
// section 8), so integration tests finish in seconds.
const TestDelay = time.Second

// Timeout bounds one attempt.
const Timeout = 10 * time.Second

// Lease is how long a claimed attempt keeps the delivery: longer than an
// attempt, so a live attempt is never made twice, and short, so one that
// died with its process is retried soon.
const Lease = Timeout + 5*time.Second

// RetryDelay returns the delay after failed attempt n (1-based), and false
// when n was the last attempt.
func RetryDelay(n int, test bool) (time.Duration, bool) {
	if n < 1 || n > len(Schedule) {
		return 0, false
	}
	if test {
		return TestDelay, true
	}
	return Schedule[n-1], true
}

// Results of an attempt, the label of evs_webhook_deliveries_total.
const (
	ResultDelivered = "delivered" // 2xx
	ResultRetry     = "retry"     // another attempt is scheduled
	ResultFailed    = "failed"    // 410 Gone, or the last attempt failed
)

// Secrets keeps the accounts' webhook secrets.
type Secrets interface {
	WebhookSecret(ctx context.Context, accountID string) (evs.WebhookSecret, error)
	PutWebhookSecret(ctx context.Context, s evs.WebhookSecret, ifCurrent string) error
}

// Store is what delivery needs from the store.
type Store interface {
	Secrets
	Batch(ctx context.Context, accountID, id string) (evs.Batch, error)
	Account(ctx context.Context, id string) (evs.Account, error)
	Delivery(ctx context.Context, accountID, batchID string) (evs.Delivery, error)
	ClaimDelivery(ctx context.Context, accountID, batchID string, attempts int, now, leaseUntil time.Time) (evs.Delivery, error)
	RecordDelivery(ctx context.Context, d evs.Delivery) error
}

// NewClient returns the HTTP client of deliveries: the egress policy on the
// address actually dialled, no proxy from the environment, no redirects,
// 10 s per attempt.
func NewClient(pol *config.EgressPolicy) *http.Client {
	d := &net.Dialer{Timeout: Timeout, Control: pol.Control}
	return &http.Client{
		Timeout: Timeout,
		Transport: &http.Transport{
			DialContext:           d.DialContext,
			TLSHandshakeTimeout:   Timeout,
			ResponseHeaderTimeout: Timeout,
			MaxIdleConns:          16,
			IdleConnTimeout:       30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Deliverer makes delivery attempts.
type Deliverer struct {
	Store  Store
	Client *http.Client
	// Body renders the event of a final batch (api.EventBody), the same
	// bytes on every retry.
	Body    func(b evs.Batch) []byte
	Now     func() time.Time
	Logger  *slog.Logger
	Observe func(result string) // counts each attempt's result (metrics)
	// Slots bounds the attempts Run makes at once (default DefaultSlots),
	// PerAccount those of one account (default DefaultPerAccount).
	Slots, PerAccount int
}

func (d *Deliverer) now() time.Time { return evs.Now(d.Now) }

func (d *Deliverer) logger() *slog.Logger { return cmp.Or(d.Logger, slog.Default()) }

// Secret returns the account's secret, creating it on first use.
func Secret(ctx context.Context, st Secrets, accountID string) (evs.WebhookSecret, error) {
	for range 3 {
		s, err := st.WebhookSecret(ctx, accountID)
		if err == nil {
			return s, nil
		}
		if evs.ErrorCode(err) != evs.CodeNotFound {
			return evs.WebhookSecret{}, err
		}
		s = evs.WebhookSecret{AccountID: accountID, Current: NewSecret()}
		err = st.PutWebhookSecret(ctx, s, "")
		if err == nil {
			return s, nil
		}
		if evs.ErrorCode(err) != evs.CodeInvalidState {
			return evs.WebhookSecret{}, err
		}
		// Created meanwhile by someone else: read theirs.
	}
	return evs.WebhookSecret{}, evs.Errorf(evs.CodeUnavailable, "The webhook secret keeps changing; retry.")
}

// MaxRetired bounds the retired secrets that still sign (each signs every
// event): a rotation that would make more is refused rather than drop one
// promised a day.
const MaxRetired = 16

// Rotate replaces the account's secret; the secrets it replaced still sign
// beside the new one for 24 h from their rotation. A rotation that loses a
// race to another starts again from the winner's secret.
func Rotate(ctx context.Context, st Secrets, accountID string, now time.Time) (evs.WebhookSecret, error) {
	now = now.UTC()
	for range 20 {
		cur, err := Secret(ctx, st, accountID)
		if err != nil {
			return evs.WebhookSecret{}, err
		}
		next := evs.WebhookSecret{AccountID: accountID, Current: NewSecret(),
			Retired: []evs.RetiredSecret{{Secret: cur.Current, RetiredAt: now}}}
		for _, r := range cur.Retired {
			if now.Before(r.RetiredAt.Add(RotationOverlap)) {
				next.Retired = append(next.Retired, r)
			}
		}
		if len(next.Retired) > MaxRetired {
			return evs.WebhookSecret{}, evs.Errorf(evs.CodeRateLimited,
				"The secret was rotated %d times in the last 24 hours; another rotation would sign every event %d times. Retry once the oldest is a day old.",
				len(next.Retired)-1, len(next.Retired)+1)
		}
		err = st.PutWebhookSecret(ctx, next, cur.Current)
		if err == nil {
			return next, nil
		}
		if evs.ErrorCode(err) != evs.CodeInvalidState {
			return evs.WebhookSecret{}, err
		}
		// Another rotation won: rotate from its secret.
	}
	return evs.WebhookSecret{}, evs.Errorf(evs.CodeUnavailable, "The webhook secret keeps changing; retry.")
}

// Attempt makes the next attempt of a batch's delivery if one is due
// (attempted), and returns the delivery as it stands afterwards. A store
// fault is an error; an unreachable receiver is a scheduled retry.
func (d *Deliverer) Attempt(ctx context.Context, accountID, batchID string) (del evs.Delivery, attempted bool, err error) {
	del, err = d.Store.Delivery(ctx, accountID, batchID)
	if err != nil {
		if evs.ErrorCode(err) == evs.CodeNotFound {
			return evs.Delivery{}, false, nil
		}
		return evs.Delivery{}, false, err
	}
	now := d.now()
	if del.State != evs.CallbackPending || del.NextAt.After(now) {
		return del, false, nil
	}
	del, err = d.Store.ClaimDelivery(ctx, accountID, batchID, del.Attempts, now, now.Add(Lease))
	if err != nil {
		if evs.ErrorCode(err) == evs.CodeInvalidState {
			return del, false, nil
		}
		return del, false, err
	}
	b, err := d.Store.Batch(ctx, accountID, batchID)
	if err != nil {
		return del, false, err
	}
	acct, err := d.Store.Account(ctx, accountID)
	if err != nil {
		return del, false, err
	}
	sec, err := Secret(ctx, d.Store, accountID)
	if err != nil {
		return del, false, err
	}
	status, sendErr := d.post(ctx, del.URL, EventID(batchID), Signers(sec, now), d.Body(b))
	result := ResultRetry
	del.LastStatus = status
	switch {
	case status >= 200 && status < 300:
		del.State, result = evs.CallbackDelivered, ResultDelivered
	case status == http.StatusGone:
		del.State, result = evs.CallbackFailed, ResultFailed
	default:
		if delay, ok := RetryDelay(del.Attempts, acct.Test); ok {
			del.NextAt = d.now().Add(delay)
		} else {
			del.State, result = evs.CallbackFailed, ResultFailed
		}
	}
	attrs := []any{slog.String("batchId", batchID), slog.String("accountId", accountID),
		slog.Int("attempt", del.Attempts), slog.Int("status", status), slog.String("result", result)}
	if sendErr != nil {
		attrs = append(attrs, slog.String("error", sendErr.Error()))
	}
	d.logger().Info("webhook attempt", attrs...)
	if d.Observe != nil {
		d.Observe(result)
	}
	// The outcome must land even while shutting down: the attempt was made.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.Store.RecordDelivery(rctx, del); err != nil && evs.ErrorCode(err) != evs.CodeInvalidState {
		return del, true, err
	}
	return del, true, nil
}

// post sends one signed attempt and returns the HTTP status (0: no reply).
func (d *Deliverer) post(ctx context.Context, url, id string, secrets []string, body []byte) (int, error) {
	ts := d.now()
	sig, err := Sign(secrets, id, ts, body)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "evs-webhooks/1")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	client := d.Client
	if client == nil {
		client = NewClient(nil)
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, config.ErrEgressRefused) {
			return 0, errors.New("the receiver's address is refused by the egress policy")
		}
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, nil
}

// DueLister lists due deliveries (store.DueDeliveries): at most
// perAccount of any one account, limit in all.
type DueLister interface {
	DueDeliveries(ctx context.Context, now time.Time, perAccount, limit int) ([]evs.Delivery, error)
}

// Run delivers due events of a store with its own delivery loop (`evs
// serve`): it polls every interval until ctx ends and returns when the
// attempts in flight are done. At most Slots attempts run at once, shared
// round-robin between accounts (evs.Fair) with at most PerAccount each: an
// attempt to a receiver that never answers holds its slot for 10 s, and
// one account's such receiver must not fill every slot.
func (d *Deliverer) Run(ctx context.Context, due DueLister, every time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots, perAccount := d.slots(), d.perAccount()
	// The store lists at most maxQueued of an account, which is all it may
	// have queued or in flight: more would only wait.
	maxQueued := 2 * perAccount
	var q *evs.Fair[evs.Delivery]
	q = evs.NewFair(slots, min(perAccount, slots), 1, func(del evs.Delivery) {
		wg.Go(func() {
			defer q.Done(del.AccountID, del.BatchID)
			if ctx.Err() != nil {
				return
			}
			if _, _, err := d.Attempt(ctx, del.AccountID, del.BatchID); err != nil && ctx.Err() == nil {
				d.logger().Error("webhook: attempt failed", slog.String("batchId", del.BatchID), slog.String("error", err.Error()))
			}
		})
	})
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		list, err := due.DueDeliveries(ctx, d.now(), maxQueued, 4*slots)
		if err != nil && ctx.Err() == nil {
			d.logger().Error("webhook: could not list due deliveries", slog.String("error", err.Error()))
		}
		if ctx.Err() == nil {
			// One a batch: a delivery already queued or in flight is not
			// queued again.
			for _, del := range list {
				q.Offer(del.AccountID, del.BatchID, del, maxQueued)
			}
			q.Dispatch()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Defaults of Deliverer.Slots and Deliverer.PerAccount.
const (
	DefaultSlots      = 16
	DefaultPerAccount = 4
)

func (d *Deliverer) slots() int { return cmp.Or(max(d.Slots, 0), DefaultSlots) }

func (d *Deliverer) perAccount() int { return cmp.Or(max(d.PerAccount, 0), DefaultPerAccount) }
