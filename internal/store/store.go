// Package store defines what the service keeps and the interfaces every
// storage implementation provides: the embedded store for `evs serve` and the
// DynamoDB adapter for AWS. Both pass the contract test suite beside these
// interfaces (contract_*_test.go). Implementations take their clock as a
// constructor argument so tests can move time.
//
// Errors: a missing item is an *evs.Error with evs.CodeNotFound; a failed
// condition is evs.CodeInvalidState (batch transitions) or the documented
// return values; a dependency fault is evs.CodeUnavailable.
//
// The decision codec is hand-written binary, not encoding/json, for the batch
// throughput and bytes per result (docs/architecture.md).
package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
)

// Keys stores accounts and their API keys.
type Keys interface {
	// CreateAccount stores a new account; an existing ID or name is
	// CodeInvalidState (AccountExists, AccountNameTaken).
	CreateAccount(ctx context.Context, a evs.Account) error
	// Account returns the account with id, or CodeNotFound.
	Account(ctx context.Context, id string) (evs.Account, error)
	// AccountByName returns the account with that name, or CodeNotFound.
	AccountByName(ctx context.Context, name string) (evs.Account, error)
	// CountAccounts tells whether the store is empty (first start).
	CountAccounts(ctx context.Context) (int, error)
	// CreateKey stores a key; the account must exist.
	CreateKey(ctx context.Context, k evs.Key) error
	// KeyByHash returns the key with that hash, or CodeNotFound.
	KeyByHash(ctx context.Context, hash string) (evs.Key, error)
	// RevokeKey marks the key whose ID or Hash equals idOrHash as revoked at
	// now. Revoking twice is not an error; an unknown key is CodeNotFound.
	RevokeKey(ctx context.Context, idOrHash string, now time.Time) (evs.Key, error)
	// ListKeys returns every key, oldest first.
	ListKeys(ctx context.Context) ([]evs.Key, error)
}

// Batches stores batch requests, their items and their results.
type Batches interface {
	// CreateBatch stores the batch and all its items in one step: either
	// everything is written or nothing is.
	CreateBatch(ctx context.Context, b evs.Batch, items []evs.Item) error
	// Batch returns the batch id of account, or CodeNotFound, also when the
	// batch belongs to another account or its ExpiresAt has passed by the
	// store's clock (expiry is lazy on DynamoDB, so it is always checked in
	// code).
	Batch(ctx context.Context, accountID, id string) (evs.Batch, error)
	// TransitionBatch moves the batch to state `to` if its state is one of
	// `from` and evs.CheckTransition allows the move, setting Error to
	// errMsg and, for a final state, CompletedAt to now. A refused move
	// gives CheckTransition's CodeInvalidState error with the batch
	// unchanged; a missing one CodeNotFound.
	TransitionBatch(ctx context.Context, accountID, id string, from []evs.State, to evs.State, errMsg string, now time.Time) (evs.Batch, error)
	// PutResults writes, in one atomic step, every result whose Seq has no
	// result yet and adds them to the counters; results already written are
	// skipped, so redelivered work is never counted twice. When the last
	// missing result is written and the batch is not final it becomes
	// completed, as does a call with no results on a batch that has them
	// all (one of no items). Results for a final batch are not written. It
	// returns the batch as it is after the step.
	PutResults(ctx context.Context, accountID, id string, results []evs.Result, now time.Time) (evs.Batch, error)
	// Results returns up to limit results with Seq > afterSeq in Seq order,
	// only those whose status is status when status is not empty.
	Results(ctx context.Context, accountID, id string, afterSeq, limit int, status evs.Status) ([]evs.Result, error)
	// InputItems returns up to limit of the batch's items from position
	// from (0 is the first) of its plan order, results or not, and the
	// position after them, or -1 once the input is read to its end. The
	// plan order is the store's: DynamoDB keeps a domain's items together
	// (an unsorted list is grouped when it is created), SQLite keeps seq
	// order (its local queue gets the whole batch grouped by domain).
	InputItems(ctx context.Context, accountID, id string, from, limit int) ([]evs.Item, int, error)
	// WithoutResults returns the given items that have no result yet, in
	// their order.
	WithoutResults(ctx context.Context, accountID, id string, items []evs.Item) ([]evs.Item, error)
	// FirstPending returns the smallest seq in (after, upTo] of an item
	// that has no result yet, or -1 when there is none.
	FirstPending(ctx context.Context, accountID, id string, after, upTo int) (int, error)
	// ListBatches returns up to limit of the account's unexpired batches
	// that come after `after` in the order of evs.BatchPos (newest first),
	// from the newest when after is zero. A batch created while a client
	// pages comes before the positions it holds (the clock moves forward),
	// so the pages it reads next neither repeat nor skip a batch. On DynamoDB the list is read
	// from an index and may miss a batch created a moment ago.
	ListBatches(ctx context.Context, accountID string, after evs.BatchPos, limit int) ([]evs.Batch, error)
	// UnfinishedBatches lists batches in state queued or running, of every
	// account, so a restarted worker resumes them.
	UnfinishedBatches(ctx context.Context) ([]evs.Batch, error)
	// ActiveBatches counts the account's unexpired batches in state queued
	// or running (on DynamoDB also those being created right now).
	ActiveBatches(ctx context.Context, accountID string) (int, error)
	// CreateBatchWithin is CreateBatch, refused with CodeRateLimited when the
	// account already has maxActive active batches (see ActiveBatches);
	// maxActive <= 0 means no limit. The count and the creation are one
	// step: two concurrent creations when one place is left never both pass.
	CreateBatchWithin(ctx context.Context, b evs.Batch, items []evs.Item, maxActive int) error
}

// ActiveBatchesFull is the message of the CodeRateLimited error of
// CreateBatchWithin; %d is the account's active batches.
const ActiveBatchesFull = "The account has %d batch requests queued or running, the most allowed; retry once one has finished."

// OpenUploadsFull is the message of an upload creation refused because
// the account already has its most open uploads (%d), saying what frees a
// place.
const OpenUploadsFull = "The account has %d open uploads, the most allowed; create a request from one (POST /v1/requests with its uploadId) or retry when the oldest expires."

// OpenUploadsLimit is the refusal of an upload creation by the open-upload
// cap, n open, the oldest expiring at oldest: the same from both stores,
// with a Retry-After of at least a second (0 invites a busy loop).
func OpenUploadsLimit(n int, oldest, now time.Time) error {
	return &LimitError{
		Err:   evs.Errorf(evs.CodeRateLimited, OpenUploadsFull, n),
		Retry: max(oldest.Sub(now), time.Second),
	}
}

// LimitError is a CodeRateLimited refusal by a per-account limit that
// knows when a retry can pass: the api turns RetryAfter into the reply's
// Retry-After.
type LimitError struct {
	Err   *evs.Error
	Retry time.Duration
}

func (e *LimitError) Error() string { return e.Err.Error() }
func (e *LimitError) Unwrap() error { return e.Err }

// RetryAfter is how long until a retry can pass.
func (e *LimitError) RetryAfter() time.Duration { return e.Retry }

// Webhooks stores the accounts' signing secrets and the delivery of each
// batch's final event (contract, section 10).
type Webhooks interface {
	// WebhookSecret returns the account's secret, or CodeNotFound.
	WebhookSecret(ctx context.Context, accountID string) (evs.WebhookSecret, error)
	// PutWebhookSecret stores s if the account's current secret is still
	// ifCurrent ("" when it has none), else CodeInvalidState: two
	// concurrent rotations cannot both win.
	PutWebhookSecret(ctx context.Context, s evs.WebhookSecret, ifCurrent string) error
	// Delivery returns the delivery of the batch's final event, or
	// CodeNotFound when the batch has none (no callback URL) or is not
	// final yet: a delivery exists from the moment its batch is final.
	Delivery(ctx context.Context, accountID, batchID string) (evs.Delivery, error)
	// ClaimDelivery starts attempt number attempts+1 of a pending, due
	// (NextAt <= now) delivery whose attempt count is still attempts:
	// Attempts becomes attempts+1 and NextAt leaseUntil. Anything else is
	// CodeInvalidState, so two workers never make the same attempt.
	ClaimDelivery(ctx context.Context, accountID, batchID string, attempts int, now, leaseUntil time.Time) (evs.Delivery, error)
	// RecordDelivery stores the outcome of attempt d.Attempts (State,
	// LastStatus, NextAt) if that is still the latest attempt, else
	// CodeInvalidState.
	RecordDelivery(ctx context.Context, d evs.Delivery) error
}

// DueDeliveries lists pending deliveries due at now, for a store that runs
// its own delivery loop (`evs serve`): at most perAccount of one account (0:
// no bound) and limit in all, the accounts taking turns, so one account's
// many cannot hide another's.
type DueDeliveries interface {
	DueDeliveries(ctx context.Context, now time.Time, perAccount, limit int) ([]evs.Delivery, error)
}

// Store is everything the service keeps.
type Store interface {
	Keys
	idempotency.Store
	Batches
	Webhooks
	Close() error
}

// CacheEntry is one verdict kept in an account's result cache, keyed by the
// account, Decision.Mode and Decision.Normalized, not read after ExpiresAt.
type CacheEntry struct {
	Decision  evs.Decision
	ExpiresAt time.Time
}

// AppendCached appends the stored form of a cached decision: under its
// normalised address, which the entry's key holds, so the decision costs
// no second copy of it; not marked as reused.
func AppendCached(b []byte, d evs.Decision) []byte {
	d.Email, d.Cached = d.Normalized, false
	return AppendDecision(b, d)
}

// LanesJSON is how both stores keep a batch's lanes: "" for none.
func LanesJSON(ls []evs.Lane) string {
	if len(ls) == 0 {
		return ""
	}
	b, _ := json.Marshal(ls) // ints and strings: cannot fail
	return string(b)
}

// LanesOf reads LanesJSON; what it cannot read is no lanes (an estimate
// without them, never a failed read of the batch).
func LanesOf(s string) []evs.Lane {
	var ls []evs.Lane
	if s != "" && json.Unmarshal([]byte(s), &ls) != nil {
		return nil
	}
	return ls
}
