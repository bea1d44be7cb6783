// Package store defines what the service keeps and the interfaces every
// storage implementation provides: the embedded store for `evs serve` and the
// DynamoDB adapter for AWS. Both pass the same contract test suite
// (package storetest).
//
// Implementations take their clock as a constructor argument so tests can
// move time (record expiry) without waiting.
//
// Errors: a missing item is an *evs.Error with evs.CodeNotFound; a failed
// condition is evs.CodeInvalidState (batch transitions) or the documented
// return values; a dependency fault is evs.CodeUnavailable.
package store

import (
	"context"
	"time"
)

// Account owns keys and batches. Test accounts get sandbox verdicts.
type Account struct {
	ID        string
	Name      string
	Test      bool
	Suspended bool
	CreatedAt time.Time
}

// Key is an API key as stored: never the secret, only its SHA-256 hash.
type Key struct {
	// ID is a short public identifier (the first 12 hex characters of the
	// hash) shown by `evs keys list` and accepted by `evs keys revoke`.
	ID string
	// Hash is the lower-case hex SHA-256 of the whole key string.
	Hash      string
	AccountID string
	Revoked   bool
	CreatedAt time.Time
	RevokedAt time.Time
	// UsageKeyID is the API Gateway usage-plan key of the account (AWS only).
	UsageKeyID string
}

// Keys stores accounts and their API keys.
type Keys interface {
	// CreateAccount stores a new account; an existing ID is an error.
	CreateAccount(ctx context.Context, a Account) error
	// Account returns the account with id, or CodeNotFound.
	Account(ctx context.Context, id string) (Account, error)
	// AccountByName returns the account with that name, or CodeNotFound.
	AccountByName(ctx context.Context, name string) (Account, error)
	// CountAccounts tells whether the store is empty (first start).
	CountAccounts(ctx context.Context) (int, error)
	// CreateKey stores a key; the account must exist.
	CreateKey(ctx context.Context, k Key) error
	// KeyByHash returns the key with that hash, or CodeNotFound.
	KeyByHash(ctx context.Context, hash string) (Key, error)
	// RevokeKey marks the key whose ID or Hash equals idOrHash as revoked at
	// now. Revoking twice is not an error; an unknown key is CodeNotFound.
	RevokeKey(ctx context.Context, idOrHash string, now time.Time) (Key, error)
	// ListKeys returns every key, oldest first.
	ListKeys(ctx context.Context) ([]Key, error)
}

// Idempotency record states.
const (
	IdemInProgress = "in_progress"
	IdemDone       = "done"
)

// IdemRecord is one Idempotency-Key's record. Scope is (account, method+path,
// key) joined into one string by the caller.
type IdemRecord struct {
	Scope       string
	Fingerprint string
	State       string
	// LockedUntil is when an in-progress record stops blocking: a crashed
	// call must not block its key forever.
	LockedUntil time.Time
	// ExpiresAt is when the record is forgotten (24 h after creation).
	ExpiresAt time.Time
	// The stored reply, once State is IdemDone.
	StatusCode int
	Headers    map[string]string
	Body       []byte
}

// Idempotency stores Idempotency-Key records.
type Idempotency interface {
	// ClaimIdempotency creates rec (State IdemInProgress) unless a record of
	// the same scope exists that is neither expired (ExpiresAt <= now) nor a
	// stale claim (in progress with LockedUntil <= now). It returns claimed
	// true when rec was written; otherwise the existing record, which the
	// caller compares (fingerprint first, then state).
	ClaimIdempotency(ctx context.Context, rec IdemRecord, now time.Time) (existing IdemRecord, claimed bool, err error)
	// CompleteIdempotency stores the reply on the in-progress record of scope
	// and marks it done.
	CompleteIdempotency(ctx context.Context, scope string, statusCode int, headers map[string]string, body []byte) error
	// ReleaseIdempotency deletes the record of scope (the first call failed
	// with a 5xx, so the client may retry).
	ReleaseIdempotency(ctx context.Context, scope string) error
}

// Batch states (contract, section 3).
const (
	StateQueued    = "queued"
	StateRunning   = "running"
	StateCompleted = "completed"
	StateCancelled = "cancelled"
	StateFailed    = "failed"
)

// Final tells whether state never changes again.
func Final(state string) bool {
	return state == StateCompleted || state == StateCancelled || state == StateFailed
}

// Counters are a batch's counters; see the contract for their invariants.
type Counters struct {
	Total         int `json:"total"`
	Duplicates    int `json:"duplicates"`
	Processed     int `json:"processed"`
	Deliverable   int `json:"deliverable"`
	Undeliverable int `json:"undeliverable"`
	Risky         int `json:"risky"`
	Unknown       int `json:"unknown"`
}

// Batch is a batch verification request.
type Batch struct {
	ID          string
	AccountID   string
	Mode        string
	State       string
	Error       string
	CreatedAt   time.Time
	CompletedAt time.Time // zero until final
	ExpiresAt   time.Time
	Counters    Counters
}

// Item is one distinct (normalized) address of a batch. Seq numbers the
// distinct addresses from 0 in submission order.
type Item struct {
	Seq    int
	Email  string // as submitted
	Domain string // normalized domain, for grouping work
}

// Result is the verdict on one item. Status is the outcome label; Decision
// is the JSON of the decision object, stored as is.
type Result struct {
	Seq      int
	Email    string
	Status   string
	Decision []byte
}

// Batches stores batch requests, their items and their results.
type Batches interface {
	// CreateBatch stores the batch and all its items in one step: either
	// everything is written or nothing is.
	CreateBatch(ctx context.Context, b Batch, items []Item) error
	// Batch returns the batch id of account, or CodeNotFound, also when the
	// batch belongs to another account or its ExpiresAt has passed by the
	// store's clock (expiry is lazy on DynamoDB, so it is always checked in
	// code).
	Batch(ctx context.Context, accountID, id string) (Batch, error)
	// TransitionBatch moves the batch to state `to` if its state is one of
	// `from`, setting Error to errMsg and, for a final state, CompletedAt to
	// now. A batch in another state gives CodeInvalidState with the batch
	// unchanged; a missing one CodeNotFound.
	TransitionBatch(ctx context.Context, accountID, id string, from []string, to, errMsg string, now time.Time) (Batch, error)
	// PutResults writes, in one atomic step, every result whose Seq has no
	// result yet and adds them to the counters; results already written are
	// skipped, so redelivered work is never counted twice. When the last
	// missing result is written and the batch is not final it becomes
	// completed. Results for a final batch are not written. It returns the
	// batch as it is after the step.
	PutResults(ctx context.Context, accountID, id string, results []Result, now time.Time) (Batch, error)
	// Results returns up to limit results with Seq > afterSeq in Seq order,
	// only those with Status == status when status is not empty.
	Results(ctx context.Context, accountID, id string, afterSeq, limit int, status string) ([]Result, error)
	// PendingItems returns up to limit items with Seq > afterSeq that have
	// no result yet, in Seq order.
	PendingItems(ctx context.Context, accountID, id string, afterSeq, limit int) ([]Item, error)
	// UnfinishedBatches lists batches in state queued or running, of every
	// account, so a restarted worker resumes them.
	UnfinishedBatches(ctx context.Context) ([]Batch, error)
}

// Store is everything the service keeps.
type Store interface {
	Keys
	Idempotency
	Batches
	Close() error
}
