package api

import (
	"context"
	"io"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// Ledger counts what an account makes the service keep, until the data
// goes: bytes against its storage quota (EVS_MAX_STORED_BYTES), outcomes
// against their cap (EVS_MAX_OUTCOMES). A long write charges as it runs
// (Hold), so the quota stops it midway; what it wrote is then removed and
// its charge given back.
type Ledger interface {
	// Charge adds n of what, kept until until, to the account's. Over
	// the account's limit it charges nothing and returns a
	// *store.LimitError (429 rate_limited naming the quota); below the
	// free-space watermark a *BusyError (503 unavailable).
	Charge(ctx context.Context, p evs.Principal, what Kept, n int64, until time.Time) error
	// Release gives back n of what charged until until, no longer kept;
	// a zero until takes them from the account's latest charges.
	Release(ctx context.Context, accountID string, what Kept, n int64, until time.Time)
}

// Kept names what a Ledger counts.
type Kept string

// What a Ledger counts.
const (
	KeptBytes    Kept = "bytes"
	KeptOutcomes Kept = "outcomes"
)

// What a kept thing is counted as besides its own bytes, so that a list
// without rows still counts: estimates of `evs serve`'s store with its
// indexes (sqlitestore's BenchmarkStorageBytes).
const (
	itemBytes    = 160
	outcomeBytes = 640
)

// holdPart is how much a Hold charges at a time: the quota and the free
// space are checked again after each part a write runs through.
const holdPart = 1 << 20

// Hold is what one write has charged to a Ledger, ahead by up to a part;
// without a ledger it charges nothing.
type Hold struct {
	l             Ledger
	p             evs.Principal
	until         time.Time
	charged, used int64
}

// NewHold starts the charge of a write of the account's kept until until.
func NewHold(l Ledger, p evs.Principal, until time.Time) *Hold {
	return &Hold{l: l, p: p, until: until}
}

// Add counts n more bytes written, charging another part when they pass
// what is charged; on a refusal nothing more may be written.
func (o *Hold) Add(ctx context.Context, n int64) error {
	o.used += n
	if o.l == nil || o.used <= o.charged {
		return nil
	}
	more := max(o.used-o.charged, holdPart)
	if err := o.l.Charge(ctx, o.p, KeptBytes, more, o.until); err != nil {
		o.used -= n
		return err
	}
	o.charged += more
	return nil
}

// Done gives back what was charged ahead and not written.
func (o *Hold) Done(ctx context.Context) {
	if o.l != nil && o.charged > o.used {
		o.l.Release(context.WithoutCancel(ctx), o.p.AccountID, KeptBytes, o.charged-o.used, o.until)
	}
	o.charged = o.used
}

// Undo gives back the whole charge: what was written is gone.
func (o *Hold) Undo(ctx context.Context) {
	o.used = 0
	o.Done(ctx)
}

// Writer counts what goes through w, and stops it once refused.
func (o *Hold) Writer(ctx context.Context, w io.Writer) io.Writer {
	return heldWriter{ctx, o, w}
}

type heldWriter struct {
	ctx context.Context
	o   *Hold
	w   io.Writer
}

func (w heldWriter) Write(p []byte) (int, error) {
	if err := w.o.Add(w.ctx, int64(len(p))); err != nil {
		return 0, err
	}
	return w.w.Write(p)
}

// Reader counts what is read through r, for a store that copies a
// stream.
func (o *Hold) Reader(ctx context.Context, r io.Reader) *HeldReader {
	return &HeldReader{ctx: ctx, o: o, r: r}
}

// HeldReader is a Hold's Reader; it keeps the refusal, which the store
// that reads it may wrap as a fault of its own.
type HeldReader struct {
	ctx context.Context
	o   *Hold
	r   io.Reader
	err error
}

func (r *HeldReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		if cerr := r.o.Add(r.ctx, int64(n)); cerr != nil {
			r.err = cerr
			return 0, cerr
		}
	}
	return n, err
}

// Refusal is the ledger's refusal behind a store's error err, if there
// was one, else err.
func (r *HeldReader) Refusal(err error) error {
	if r.err != nil {
		return r.err
	}
	return err
}
