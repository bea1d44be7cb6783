package idempotency

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// Lifetimes of a record.
const (
	// Retention is how long a key's record, and so its stored reply, is kept.
	Retention = 24 * time.Hour
	// LockTimeout is how long an unfinished first call blocks its key in
	// shared mode, so a crashed call frees it; well above the longest
	// synchronous call (API Gateway stops waiting after 29 s). A local
	// Keeper honours such records a shared one left in the store.
	LockTimeout = 5 * time.Minute
)

// ReplayedHeader marks a reply served from a stored record.
const ReplayedHeader = "Idempotent-Replayed"

// Idempotency record states.
const (
	InProgress = "in_progress"
	Done       = "done"
)

// Record is one Idempotency-Key's record. Scope is (account, method+path,
// key) joined into one string by the caller.
type Record struct {
	Scope       string
	Fingerprint string
	State       string
	LockedUntil time.Time // when an in-progress record stops blocking, so a crashed call frees its key
	ExpiresAt   time.Time // when the record is forgotten
	// The stored reply, once State is Done.
	StatusCode int
	Headers    map[string]string
	Body       []byte
}

// Store keeps Idempotency-Key records: the embedded store and the DynamoDB
// adapter implement it, and both pass the store contract suite.
type Store interface {
	// ClaimIdempotency creates rec (State InProgress) unless a record of
	// the same scope exists that is neither expired (ExpiresAt <= now) nor a
	// stale claim (in progress with LockedUntil <= now). It returns claimed
	// true when rec was written; otherwise the existing record, which the
	// caller compares (fingerprint first, then state).
	ClaimIdempotency(ctx context.Context, rec Record, now time.Time) (existing Record, claimed bool, err error)
	// CompleteIdempotency stores the reply on the in-progress record of scope
	// and marks it done.
	CompleteIdempotency(ctx context.Context, scope string, statusCode int, headers map[string]string, body []byte) error
	// ReleaseIdempotency deletes the record of scope (the first call failed
	// with a 5xx, so the client may retry).
	ReleaseIdempotency(ctx context.Context, scope string) error
}

// LocalStore keeps Idempotency-Key records for a Keeper in local mode
// (NewLocal). The embedded store implements it.
type LocalStore interface {
	// LookupIdempotency returns the live record of scope: not expired
	// (ExpiresAt > now) and, if in progress (as a shared Keeper may have
	// left it), not stale (LockedUntil > now). It does not wait for writes
	// in progress elsewhere in the store.
	LookupIdempotency(ctx context.Context, scope string, now time.Time) (rec Record, found bool, err error)
	// PutIdempotency stores rec, a finished record (State Done, with its
	// reply), in one write that is durable when it returns. It replaces an
	// expired or stale record of the scope; if a live record exists it
	// fails and changes nothing.
	PutIdempotency(ctx context.Context, rec Record, now time.Time) error
}

// Reply is an answer as its meaning, the form it is stored in: the status,
// the headers the handler chose, and the body without any request id (the
// edge renders each call's id into it). So a replay is rendered exactly like
// a fresh reply, and nothing edits stored JSON.
type Reply struct {
	StatusCode int
	Headers    map[string]string
	Body       []byte
	// Stream, when set, writes the rest of the body after Body, as it is
	// read (a CSV of any length in constant memory). It is never stored:
	// only replies to GET, which take no Idempotency-Key, stream. An error
	// it returns cuts the connection, so that a client never takes half a
	// list for the whole of it.
	Stream func(w io.Writer) error
}

// Request is what identifies a call for idempotency.
type Request struct {
	AccountID   string
	Method      string
	Path        string
	Key         string // the Idempotency-Key header value
	ContentType string
	Body        []byte
}

// Scope joins an idempotency scope (account, method+path, key) into the
// string the store keys records by. NUL cannot occur in any part, so
// distinct scopes never join to the same string.
func Scope(accountID, method, path, key string) string {
	return accountID + "\x00" + method + " " + path + "\x00" + key
}

// Keeper runs handlers at most once per Idempotency-Key. It is safe for
// concurrent use.
type Keeper struct {
	// store is set in shared mode, local in local mode.
	store Store
	local LocalStore
	now   func() time.Time

	// claims holds, in local mode, the running calls' scopes and
	// fingerprints: the in-progress records of shared mode, unwritten.
	claims *claimSet
}

// New returns a Keeper in shared mode (see the package doc), keeping its
// records in s, with now as its clock.
func New(s Store, now func() time.Time) *Keeper {
	return &Keeper{store: s, now: now}
}

// NewLocal returns a Keeper in local mode (see the package doc), keeping its
// records in s, with now as its clock: half the writes of shared mode, and
// correct only while no other Keeper, here or in another process, uses s.
func NewLocal(s LocalStore, now func() time.Time) *Keeper {
	return &Keeper{local: s, now: now, claims: &claimSet{seed: maphash.MakeSeed()}}
}

// Do runs fn at most once per (AccountID, Method+Path, Key) scope within
// Retention, and returns its reply and replayed=false; it returns the stored
// reply and replayed=true for a repeat of a finished call.
//
// A repeat with another fingerprint fails with evs.CodeIdempotencyKeyReused,
// one while the first call runs with evs.CodeIdempotencyInProgress, an
// invalid key with evs.CodeInvalidRequest. When fn fails, or answers 5xx, the
// record is deleted so the client may retry, and fn's reply and error are
// returned. Store faults are returned wrapped; if storing the finished reply
// fails, the reply is returned along with the error, since the work is done,
// and the key is left free like after a 5xx: the caller answers 5xx, and fn
// must find its own earlier effect on the retry if it has one that must
// not happen twice.
//
// The writes after fn (complete or release) ignore ctx's cancellation: a
// client that hangs up after fn finished must not leave its key blocked for
// LockTimeout, or stored without its reply.
func (k *Keeper) Do(ctx context.Context, req Request, fn func(ctx context.Context) (Reply, error)) (Reply, bool, error) {
	if err := ValidKey(req.Key); err != nil {
		return Reply{}, false, err
	}
	scope := Scope(req.AccountID, req.Method, req.Path, req.Key)
	fp := Fingerprint(req.Method, req.Path, req.ContentType, req.Body)
	if k.local != nil {
		return k.doLocal(ctx, scope, fp, fn)
	}
	now := k.now()
	existing, claimed, err := k.store.ClaimIdempotency(ctx, Record{
		Scope:       scope,
		Fingerprint: fp,
		State:       InProgress,
		LockedUntil: now.Add(LockTimeout),
		ExpiresAt:   now.Add(Retention),
	}, now)
	if err != nil {
		return Reply{}, false, fmt.Errorf("idempotency: claim key: %w", err)
	}
	if !claimed {
		r, err := replay(existing, fp)
		return r, err == nil, err
	}
	return k.run(ctx, scope, fn)
}

// run calls fn on a claimed scope and settles the record.
func (k *Keeper) run(ctx context.Context, scope string, fn func(ctx context.Context) (Reply, error)) (reply Reply, replayed bool, err error) {
	settle := context.WithoutCancel(ctx)
	settled := false
	defer func() {
		if !settled {
			// fn panicked: free the key before the panic goes on, rather
			// than block it for LockTimeout.
			_ = k.store.ReleaseIdempotency(settle, scope)
		}
	}()
	reply, err = fn(ctx)
	settled = true
	failed := "call"
	if err == nil && reply.StatusCode < 500 {
		cerr := k.store.CompleteIdempotency(settle, scope, reply.StatusCode, reply.Headers, reply.Body)
		if cerr == nil {
			return reply, false, nil
		}
		// The caller answers 5xx, which leaves no record: free the key
		// now, so the retry runs at once, not "in progress" until
		// LockTimeout. A handler whose effect must not happen twice finds
		// it again on the retry (api: batches created under a key).
		err, failed = fmt.Errorf("idempotency: store reply: %w", cerr), "reply"
	}
	if rerr := k.store.ReleaseIdempotency(settle, scope); rerr != nil {
		err = errors.Join(err, fmt.Errorf("idempotency: release key after a failed %s: %w", failed, rerr))
	}
	return reply, false, err
}

// doLocal is Do in local mode.
func (k *Keeper) doLocal(ctx context.Context, scope, fp string, fn func(ctx context.Context) (Reply, error)) (Reply, bool, error) {
	if running, ok := k.claims.claim(scope, fp); !ok {
		// Answered as a live in-progress record is in shared mode.
		_, err := replay(Record{Scope: scope, Fingerprint: running, State: InProgress}, fp)
		return Reply{}, false, err
	}
	// Released on every return and on a panic in fn, and only after the
	// reply is stored: a repeat that takes the claim next is sure to find
	// the record, since it looks up only once it holds the claim.
	defer k.claims.release(scope)

	now := k.now()
	rec, found, err := k.local.LookupIdempotency(ctx, scope, now)
	if err != nil {
		return Reply{}, false, fmt.Errorf("idempotency: look up key: %w", err)
	}
	if found {
		r, err := replay(rec, fp)
		return r, err == nil, err
	}
	reply, err := fn(ctx)
	if err != nil || reply.StatusCode >= 500 {
		return reply, false, err // nothing was written, so nothing to undo
	}
	// The same now as the lookup: a record it found dead is dead to the
	// put too, whatever the clock did meanwhile. Like the rest of the
	// settling, the put outlives a client that hung up.
	err = k.local.PutIdempotency(context.WithoutCancel(ctx), Record{
		Scope:       scope,
		Fingerprint: fp,
		State:       Done,
		LockedUntil: now,
		ExpiresAt:   now.Add(Retention),
		StatusCode:  reply.StatusCode,
		Headers:     reply.Headers,
		Body:        reply.Body,
	}, now)
	if err != nil {
		return reply, false, fmt.Errorf("idempotency: store reply: %w", err)
	}
	return reply, false, nil
}

// replay answers a call whose scope already has a live record.
func replay(rec Record, fp string) (Reply, error) {
	if rec.Fingerprint != fp {
		return Reply{}, evs.Errorf(evs.CodeIdempotencyKeyReused, "This Idempotency-Key was already used for a different request; use a new key for a new request.")
	}
	if rec.State != Done {
		return Reply{}, evs.Errorf(evs.CodeIdempotencyInProgress, "A request with this Idempotency-Key is still being processed; retry later.")
	}
	h := make(map[string]string, len(rec.Headers)+1)
	maps.Copy(h, rec.Headers)
	h[ReplayedHeader] = "true"
	return Reply{StatusCode: rec.StatusCode, Headers: h, Body: rec.Body}, nil
}

// claimShards is how many locks the claims are spread over: the calls of one
// committed group release their claims together, and under one lock they
// queued, which measurably capped the rate of idempotent calls.
const claimShards = 64

// claimSet is the set of running scopes, each with its fingerprint.
type claimSet struct {
	seed   maphash.Seed
	shards [claimShards]struct {
		mu sync.Mutex
		m  map[string]string
	}
}

// claim takes scope for a call with fingerprint fp, or reports false and
// the fingerprint of the call that holds it.
func (c *claimSet) claim(scope, fp string) (running string, ok bool) {
	sh := &c.shards[maphash.String(c.seed, scope)%claimShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if running, held := sh.m[scope]; held {
		return running, false
	}
	if sh.m == nil {
		sh.m = make(map[string]string)
	}
	sh.m[scope] = fp
	return "", true
}

func (c *claimSet) release(scope string) {
	sh := &c.shards[maphash.String(c.seed, scope)%claimShards]
	sh.mu.Lock()
	delete(sh.m, scope)
	sh.mu.Unlock()
}
