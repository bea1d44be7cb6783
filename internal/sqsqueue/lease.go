package sqsqueue

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
)

// HostLeases hands out a bounded number of leases per MX host, shared by
// every worker invocation (dynamostore implements it on DynamoDB). A lease
// not released expires after ttl, so a crashed invocation cannot hold a
// host forever.
type HostLeases interface {
	// AcquireHost takes one of host's slots leases if one is free: ok
	// false means all are held. release gives it back.
	AcquireHost(ctx context.Context, host string, slots int, ttl time.Duration) (release func(), ok bool, err error)
}

// PreferredMX names the mail host a domain's SMTP session goes to first
// (*verify.Engine implements it).
type PreferredMX interface {
	PreferredMX(ctx context.Context, domain string) (host string, ok bool)
}

// lease takes a lease on the preferred MX host of g's domain when g will
// open an SMTP session: full mode, a live account, a domain with mail
// hosts. Otherwise it needs none and ok is true.
func (w *Worker) lease(ctx context.Context, test bool, mode evs.Mode, g batch.Group) (release func(), ok bool, err error) {
	none := func() {}
	if w.Leases == nil || w.MX == nil || test || mode != evs.ModeFull || g.Domain == "" {
		return none, true, nil
	}
	// The session goes to the most preferred host unless it fails; the
	// lease is on that host.
	host, ok := w.MX.PreferredMX(ctx, g.Domain)
	if !ok {
		return none, true, nil // no session will be opened
	}
	slots := w.HostSlots
	if slots <= 0 {
		slots = 2
	}
	ttl := w.LeaseTTL
	if ttl <= 0 {
		ttl = 6 * time.Minute
	}
	return w.Leases.AcquireHost(ctx, host, slots, ttl)
}

// busyDelay is the SQS delay, in seconds, of a group that found its host's
// leases all held: jittered so that re-queued groups spread out.
func (w *Worker) busyDelay() int32 {
	d := w.BusyDelay
	if d <= 0 {
		d = 20 * time.Second
	}
	d = d/2 + rand.N(d/2+1)
	return int32(min(max(d/time.Second, 1), 900))
}

// expire completes a batch past its deadline: every pending item ends as
// unknown/timeout.
func (w *Worker) expire(ctx context.Context, b evs.Batch) error {
	acct, err := w.Accounts.Account(ctx, b.AccountID)
	if err != nil {
		return err
	}
	items, err := batch.AllPending(ctx, w.Store, b.AccountID, b.ID)
	if err != nil {
		return err
	}
	rs := batch.TimeoutResults(items, evs.Mode(b.Mode), acct.Test, batch.DetailDeadline, w.now())
	// At least one call, also with nothing pending: PutResults then
	// completes a batch whose last results were written but which was
	// never completed (a crash in between).
	for start := 0; start == 0 || start < len(rs); start += 1000 {
		final, err := w.Store.PutResults(ctx, b.AccountID, b.ID, rs[start:min(start+1000, len(rs))], w.now())
		if err != nil {
			return err
		}
		// Queues the webhook once the last chunk made the batch final.
		w.finalized(ctx, final)
	}
	return nil
}
