package evs

import (
	"slices"
	"time"
)

// State is where a batch is in its life.
type State string

// Batch states. Completed, Cancelled and Failed are final.
const (
	StateQueued    State = "queued"
	StateRunning   State = "running"
	StateCompleted State = "completed"
	StateCancelled State = "cancelled"
	StateFailed    State = "failed"
)

// Final tells whether the state never changes again.
func (s State) Final() bool { return s == StateCompleted || s == StateCancelled || s == StateFailed }

// moves are a batch's transitions: queued → running → completed;
// queued/running → cancelled (by the client); any non-final state → failed
// (the service gave up).
var moves = map[State][]State{
	StateQueued:  {StateRunning, StateCancelled, StateFailed},
	StateRunning: {StateCompleted, StateCancelled, StateFailed},
}

// CanMove tells whether a batch in state s may move to state to.
func (s State) CanMove(to State) bool { return slices.Contains(moves[s], to) }

// CheckTransition is the rule every store applies to moving b to `to` by a
// caller that believes b is in one of from: nil, or a CodeInvalidState error
// saying why. A store with conditional writes runs it on the batch it reads
// back after a refusal, so both kinds give the same answer.
func CheckTransition(b Batch, from []State, to State) error {
	switch {
	case !slices.Contains(from, b.State) || !b.State.CanMove(to):
		return Errorf(CodeInvalidState, "The request is %s.", b.State)
	case to == StateCompleted && !b.Counters.AllDone():
		// A completed batch has every result; PutResults completes it
		// when the last one is written.
		return Errorf(CodeInvalidState, "The request still has items without a result.")
	}
	return nil
}

// Live tells whether a record expiring at expiresAt (exclusive) is still
// there at now. Every store reads with this rule whether or not its deletion
// has run yet (DynamoDB's TTL deletes late).
func Live(expiresAt, now time.Time) bool { return now.Before(expiresAt) }

// Now reads clock now, or time.Now when it is nil (a type's Now field left unset).
func Now(now func() time.Time) time.Time {
	if now == nil {
		return time.Now()
	}
	return now()
}

// Counters are a batch's counters. At every moment a client can observe:
// Processed = Deliverable + Undeliverable + Risky + Unknown <= Total - Duplicates.
type Counters struct {
	Total         int
	Duplicates    int
	Processed     int
	Deliverable   int
	Undeliverable int
	Risky         int
	Unknown       int
}

// AllDone tells whether every distinct address has its result: the
// condition of state completed.
func (c Counters) AllDone() bool { return c.Processed >= c.Total-c.Duplicates }

// Add counts one processed address with the given status.
func (c *Counters) Add(s Status) {
	c.Processed++
	switch s {
	case Deliverable:
		c.Deliverable++
	case Undeliverable:
		c.Undeliverable++
	case Risky:
		c.Risky++
	default:
		c.Unknown++
	}
}

// Batch is a batch verification request.
type Batch struct {
	ID          string
	AccountID   string
	Mode        Mode
	State       State
	Error       string
	CreatedAt   time.Time
	CompletedAt time.Time // zero until final
	ExpiresAt   time.Time
	Counters    Counters
	// CallbackURL, when set at creation, receives the signed event of the
	// batch's final state. Stores write it into the batch's Delivery record;
	// Batch readers leave it empty (read it back with Delivery).
	CallbackURL string
	// MaxAge bounds the age of the cached verdicts the batch reuses (the
	// request's maxAge): 0 when the request gave none, NoReuse for maxAge 0.
	MaxAge time.Duration
	Name   string // the user's label, at most MaxBatchName characters, or ""
	// Lanes are the batch's largest parts at one mail provider, as found
	// when it was created (full mode): the provider's RCPT budget bounds
	// how soon each can finish, whatever else the batch holds.
	Lanes []Lane
}

// Lane is a batch's addresses at one mail provider and the RCPT commands
// a minute the provider takes from us, across our exits.
type Lane struct {
	Provider   string `json:"p"`
	Addresses  int    `json:"n"`
	RcptPerMin int    `json:"r"`
}

// MaxBatchName is the longest batch name, in characters.
const MaxBatchName = 200

// BatchPos is a place in an account's list of batches, newest first:
// CreatedAt then ID descending, so batches of the same millisecond have one
// order. It names the batch listed last; the zero BatchPos is the start.
type BatchPos struct {
	CreatedAt time.Time
	ID        string
}

// IsZero tells whether p is the start of the list.
func (p BatchPos) IsZero() bool { return p.CreatedAt.IsZero() && p.ID == "" }

// PosOf is the place of b in its account's list.
func PosOf(b Batch) BatchPos { return BatchPos{CreatedAt: b.CreatedAt, ID: b.ID} }

// NoReuse is a MaxAge that reuses no cached verdict: a request's maxAge 0.
const NoReuse time.Duration = -1

// Item is one distinct (normalized) address of a batch. Seq numbers the
// distinct addresses from 0 in submission order.
type Item struct {
	Seq    int
	Email  string // as submitted
	Domain string // normalized domain, for grouping work
}

// PackSize is the most addresses of one domain a batch's work message
// carries: the worker's default pack, and the unit in which the stored
// input keeps a domain's addresses together, so each pack is one message.
const PackSize = 200

// Result is the verdict on one item.
type Result struct {
	Seq      int
	Email    string
	Decision Decision
}

// Status returns the outcome label of the result.
func (r Result) Status() Status { return r.Decision.Status() }

// Upload is a list the client sends to a URL of its own rather than in a
// request body; a batch is then created from it.
type Upload struct {
	ID          string
	AccountID   string
	ContentType string // "text/csv" or "application/json"
	CreatedAt   time.Time
	ExpiresAt   time.Time // ends both the URL and the ID
	MaxBytes    int64     // the largest list the URL takes
}

// ExportTTL is how long an exported result list's URL works (GET
// /v1/requests/{id}/export, and the 303 of a large CSV on AWS): long enough
// to start a download, short enough that a leaked URL soon stops working.
const ExportTTL = 15 * time.Minute

// UploadMaxBytes is the largest uploaded list, and UploadMaxAddresses the
// most addresses one may hold.
const (
	UploadMaxBytes     = 100 << 20
	UploadMaxAddresses = 1_000_000
)
