package api

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
)

// Budgets tells a domain's mail provider and the RCPT commands a minute it
// takes from us across our exits (politeness.Gate.Budget).
type Budgets interface {
	Budget(ctx context.Context, domain string) (provider string, rcptPerMin int)
}

// Lanes of a new batch: its largest domains are looked up, at most
// maxLaneDomains of at least laneMin addresses, within laneLookup, so
// creation stays fast; a domain whose mail host is not found in time has
// no lane.
const (
	maxLaneDomains = 10
	laneMin        = 200
	laneLookup     = 2 * time.Second
)

// lanes returns a full-mode batch's parts at its largest domains' mail
// providers, slowest first.
func (h *Handler) lanes(ctx context.Context, items []evs.Item) []evs.Lane {
	count := map[string]int{}
	for _, it := range items {
		if it.Domain != "" {
			count[it.Domain]++
		}
	}
	var domains []string
	for d, n := range count {
		if n >= laneMin {
			domains = append(domains, d)
		}
	}
	slices.SortFunc(domains, func(a, b string) int { return cmp.Or(count[b]-count[a], cmp.Compare(a, b)) })
	domains = domains[:min(len(domains), maxLaneDomains)]
	ctx, cancel := context.WithTimeout(ctx, laneLookup)
	defer cancel()
	found := make([]evs.Lane, len(domains))
	var wg sync.WaitGroup
	for i, d := range domains {
		wg.Go(func() {
			p, r := h.d.Budgets.Budget(ctx, d)
			found[i] = evs.Lane{Provider: p, Addresses: count[d], RcptPerMin: r}
		})
	}
	wg.Wait()
	// Domains at one provider share its budget; one without a mail host
	// has no lane (its addresses need no RCPT).
	var out []evs.Lane
	for _, l := range found {
		if l.RcptPerMin <= 0 {
			continue
		}
		if i := slices.IndexFunc(out, func(o evs.Lane) bool { return o.Provider == l.Provider }); i >= 0 {
			out[i].Addresses += l.Addresses
			continue
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b evs.Lane) int { return cmp.Compare(laneTime(b), laneTime(a)) })
	return out
}

// laneTime is the least time a lane takes: the RCPT commands its
// addresses send, as the worker reserves them, at the provider's budget.
func laneTime(l evs.Lane) time.Duration {
	if l.RcptPerMin <= 0 {
		return 0
	}
	rcpts := politeness.Rcpts(l.Addresses, politeness.SessionAddresses)
	return time.Duration(float64(rcpts) / float64(l.RcptPerMin) * float64(time.Minute))
}

// minRateSample is how long, and how much of it done, before a batch's
// pace so far says anything of its end.
const (
	minRateTime  = time.Minute
	minRateShare = 0.01
)

// estimate returns when an unfinished batch should be done, at the
// earliest: the later of its slowest lane's end, counted from its
// creation at the provider's full budget, and its end at its pace so far
// (once it has run a minute and done a hundredth). Small domains finish
// long before a large provider's lane, so the pace alone would promise too
// much; the lanes alone miss everything else. Zero when neither is known.
func estimate(b evs.Batch, now time.Time) time.Time {
	var at time.Time
	for _, l := range b.Lanes {
		if end := b.CreatedAt.Add(laneTime(l)); end.After(at) {
			at = end
		}
	}
	c := b.Counters
	distinct := c.Total - c.Duplicates
	if ran := now.Sub(b.CreatedAt); ran >= minRateTime && c.Processed > 0 && float64(c.Processed) >= minRateShare*float64(distinct) {
		left := time.Duration(float64(ran) * float64(distinct-c.Processed) / float64(c.Processed))
		if end := now.Add(left); end.After(at) {
			at = end
		}
	}
	if !at.IsZero() && at.Before(now) {
		at = now // late: due now, not in the past
	}
	return at
}

// withETA adds an unfinished batch's deadline (EVS_BATCH_DEADLINE from its
// creation) and estimate to e.
func (h *Handler) withETA(e batchEnvelope, b evs.Batch) batchEnvelope {
	if b.State.Final() {
		return e
	}
	if h.d.BatchDeadline > 0 {
		e.Request.DeadlineAt = &evs.Time{Time: b.CreatedAt.Add(h.d.BatchDeadline)}
	}
	if at := estimate(b, h.d.Now()); !at.IsZero() {
		e.Request.EstimatedCompletionAt = &evs.Time{Time: at.UTC().Truncate(time.Second)}
	}
	return e
}
