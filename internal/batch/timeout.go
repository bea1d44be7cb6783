package batch

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/verify"
)

// Details of the results written when a time limit, not the receiving
// server, ends an address's verification.
const (
	DetailDeadline = "the batch deadline passed before this address was verified (EVS_BATCH_DEADLINE)"
	DetailSession  = "no reply within the SMTP session's time limit, at every attempt"
)

// Expire ends batch b, past its deadline: every address still pending gets
// unknown/timeout, chunk results at a time. PutResults is called at least
// once, so a batch a crash left uncompleted completes too. written, if
// set, is handed the batch after each write.
func Expire(ctx context.Context, st Store, b evs.Batch, test bool, now func() time.Time, chunk int, written func(evs.Batch)) error {
	items, err := AllPending(ctx, st, b.AccountID, b.ID)
	if err != nil {
		return err
	}
	chunk = positiveOr(chunk, 1000)
	rs := TimeoutResults(items, b.Mode, test, DetailDeadline, now())
	for start := 0; start == 0 || start < len(rs); start += chunk {
		got, err := st.PutResults(ctx, b.AccountID, b.ID, rs[start:min(start+chunk, len(rs))], now())
		if err != nil {
			return err
		}
		if written != nil {
			written(got)
		}
	}
	return nil
}

// TimeoutResults returns an unknown/timeout result for each item, with the
// evidence that needs no network and detail in checks.smtp: a time limit of
// ours ended the work, so the address was not shown good or bad.
func TimeoutResults(items []evs.Item, mode evs.Mode, test bool, detail string, now time.Time) []evs.Result {
	out := make([]evs.Result, len(items))
	for i, it := range items {
		in := verify.Inspect(it.Email)
		d := evs.Decision{
			Email:  it.Email,
			Mode:   mode,
			Reason: evs.ReasonTimeout,
			Flags:  in.Flags,
			Checks: evs.Checks{
				Syntax: evs.SyntaxCheck{Valid: in.Valid, Error: in.SyntaxRule},
				DNS:    evs.DNSCheck{Result: evs.DNSNotChecked, MX: []string{}},
				SMTP:   evs.SMTPCheck{Result: evs.SMTPTimeout, Detail: detail},
			},
			CheckedAt: evs.Time{Time: now.UTC()},
			TestMode:  test,
		}
		if in.Valid {
			d.Normalized = in.Address.String()
			if in.SuggestedDomain != "" {
				s := in.Address.Local + "@" + in.SuggestedDomain
				d.Suggestion = &s
			}
		}
		d.Score = verify.Score(d)
		out[i] = evs.Result{Seq: it.Seq, Email: it.Email, Decision: d}
	}
	return out
}

// PastDeadline tells whether b has outlived deadline (0 means none). A
// batch starts when it is created: both runtimes pick it up at once.
func PastDeadline(b evs.Batch, deadline time.Duration, now time.Time) bool {
	return deadline > 0 && !b.CreatedAt.IsZero() && !now.Before(b.CreatedAt.Add(deadline))
}

// RetryDelay is the wait before retry n (0-based) of work a store or queue
// fault interrupted: exponential from base, capped at max, then jittered
// to between half and all of that, so that many batches waiting on the same
// dependency do not come back at the same instant.
func RetryDelay(base, max time.Duration, n int) time.Duration {
	d := politeness.Double(base, max, n)
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx ends, and reports whether the full wait
// elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
