package batch

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/verify"
)

// The step the Worker runs for each domain group of a message: it reads
// the result cache, leases a session from the politeness gate, probes, and
// sorts what is left; the Worker decides where that goes.

// task is one unit of work: a domain group of one batch, at one attempt.
type task struct {
	b         evs.Batch
	test      bool
	group     Group
	attempt   int
	cacheRead bool          // items looked up in the result cache already
	waited    time.Duration // back-off waited since the first greylisting
}

// stepDone is what one step left for its driver.
type stepDone struct {
	results []evs.Result // verdicts to write
	retry   []evs.Item   // greylisted, for the next attempt after retryIn
	retryIn time.Duration
	// wait is the items that wait for the provider of key, at the same
	// attempt: until until (a pause, the next RCPT window) or, forSlot,
	// until a session of key ends.
	wait    []evs.Item
	until   time.Time
	forSlot bool
	key     string
	left    []evs.Item // not started before startBy: same attempt, elsewhere
	// released: a session slot of key went back, which parked work may
	// take (the Worker starts it; in memory the gate wakes its waiters).
	released bool
	// err: cut short (cancel, shutdown, a deadline) or the politeness
	// state failed; what has no result stays pending.
	err error
}

// stepper runs steps; the Worker builds one from its configuration.
type stepper struct {
	proc *Processor
	// gate admits live full-mode sessions (nil: no limit). waitForSlot
	// waits for a slot in this call, as on the LocalQueue (a session of
	// its own process ends soon); else a refusal comes back as wait.
	gate        *politeness.Gate
	waitForSlot bool
	cache       ResultCache
	grey        GreyFacts
	greyBackoff time.Duration
	logger      *slog.Logger
}

// admissionKeys are the politeness keys a group that opens an SMTP
// session may take, one per exit (politeness.Gate.HostKeys), or none when
// it needs no admission: test accounts, quick and standard modes, invalid
// addresses and domains without a mail host.
func (s stepper) admissionKeys(ctx context.Context, t task) []string {
	g := s.gate
	if g == nil || t.test || t.b.Mode != evs.ModeFull || t.group.Domain == "" {
		return nil
	}
	host, ok := g.MailHost(ctx, t.group.Domain)
	if !ok {
		return nil
	}
	return g.HostKeys(host)
}

// run runs one step of t, starting no SMTP session at or after startBy
// (the zero time: no limit).
func (s stepper) run(ctx context.Context, t task, startBy time.Time) (d stepDone) {
	g := t.group
	// The result cache serves live full-mode groups only: a quick-mode
	// group costs one DNS lookup, less than a cache read per address.
	cached := s.cache != nil && !t.test && t.b.Mode == evs.ModeFull && g.Domain != ""
	if cached && !t.cacheRead {
		// The cache first, even past startBy: a read is no SMTP session,
		// and what is left is then known to be looked up.
		d.results, g.Items = s.fromCache(ctx, t.b, g.Items)
		if len(g.Items) == 0 {
			return d
		}
	}
	if !startBy.IsZero() && !time.Now().Before(startBy) {
		d.left = g.Items
		return d
	}
	ticket := politeness.Ticket{} // admits nothing: Done does nothing
	if keys := s.admissionKeys(ctx, t); len(keys) > 0 {
		d.key = keys[0]
		var err error
		if s.waitForSlot {
			ticket, err = s.gate.Wait(ctx, keys, s.proc.RcptBound(len(g.Items)), 0)
		} else {
			ticket, err = s.gate.AdmitAny(ctx, keys, s.proc.RcptBound(len(g.Items)))
		}
		d.key = cmp.Or(ticket.Key, d.key)
		if d.err = cmp.Or(err, ctx.Err()); d.err != nil {
			return d
		}
		if !ticket.OK {
			// The slot a budget refusal took went back, but starts no
			// parked work: what is left of the budget covers no address
			// of any group of the key, and each would only park again.
			d.wait, d.until, d.forSlot = g.Items, ticket.Retry, ticket.ForSlot
			return d
		}
		if s.proc.RcptBound(len(g.Items)) > ticket.Rcpts {
			// The budget left covers part of the group (at least one
			// address): the rest waits until more fits.
			n := max(s.proc.ItemsWithin(ticket.Rcpts), 1)
			g.Items, d.wait, d.until = g.Items[:n], g.Items[n:], ticket.Retry
		}
		// The session leaves from the exit whose budget it spends.
		ctx = verify.WithExit(ctx, politeness.EgressOf(d.key))
	}
	var extra SlotFunc
	if d.key != "" && ticket.OK && s.proc.GroupSessions > 1 {
		// Further sessions of the group at once, each on a slot of its
		// own; the ticket reserved the RCPT commands of them all.
		key := d.key
		extra = func(ctx context.Context) (func(), bool) {
			release, ok, err := s.gate.ExtraSlot(ctx, key)
			if err != nil {
				s.logger.Warn("politeness: no further session slot", slog.String("key", key), slog.String("error", err.Error()))
			}
			return release, ok && err == nil
		}
	}
	o, err := s.proc.VerifyGroupWith(ctx, startBy, t.test, t.b.Mode, g, t.attempt, extra)
	until, perr := ticket.Done(ctx, o.Throttled)
	switch {
	case perr != nil:
		s.logger.Error("politeness: could not keep a provider's pause", slog.String("key", d.key), slog.String("error", perr.Error()))
	case o.Throttled && d.key != "":
		s.logger.Warn("politeness: the provider throttled us; paused for every session", slog.String("key", d.key), slog.Time("until", until))
	}
	d.released = ticket.OK && !o.Throttled
	d.results = append(d.results, o.Results...)
	s.learnGrey(ctx, t, o.Results)
	if cached && len(o.Results) > 0 {
		ds := make([]evs.Decision, len(o.Results))
		for i := range o.Results {
			ds[i] = o.Results[i].Decision
		}
		// The cache itself leaves out what may not be reused; a fault
		// costs a later probe, the verdicts stand.
		if err := s.cache.Keep(ctx, t.b.AccountID, ds...); err != nil {
			s.logger.Error("could not keep verdicts in the result cache", slog.String("batchId", t.b.ID),
				slog.String("accountId", t.b.AccountID), slog.String("error", err.Error()))
		}
	}
	if o.Throttled {
		// What the server did not answer waits for the provider's pause
		// (the first pause, had the gate none to give).
		if until.IsZero() {
			until = s.gateNow().Add(s.gate.FirstPause())
		}
		d.wait = append(d.wait, o.Left...)
		d.until = maxTime(d.until, until)
	} else {
		d.left = o.Left
	}
	if len(o.ExitDown) > 0 {
		// Our exit failed: no verdict, the same attempt later, bounded by
		// the batch's deadline.
		d.wait = append(d.wait, o.ExitDown...)
		d.until = maxTime(d.until, s.gateNow().Add(cmp.Or(s.proc.ExitRetry, DefaultExitRetry)))
	}
	if len(o.Retry) > 0 {
		d.retry = o.Retry
		d.retryIn = s.greyDelay(ctx, t)
	}
	d.err = err
	return d
}

// fromCache looks each item up in b's account's cache, within b's maxAge,
// and returns the hits as results (decision.cached set, the original
// checkedAt kept) and the other items, to be probed.
func (s stepper) fromCache(ctx context.Context, b evs.Batch, items []evs.Item) (hits []evs.Result, rest []evs.Item) {
	rest = items[:0:0]
	for _, it := range items {
		if key, ok := verify.ItemKey(it); ok {
			if d, hit := s.cache.Lookup(ctx, b.AccountID, b.Mode, key, it.Email, b.MaxAge); hit {
				hits = append(hits, evs.Result{Seq: it.Seq, Email: it.Email, Decision: d})
				continue
			}
		}
		rest = append(rest, it)
	}
	return hits, rest
}

// GreyFacts remembers, per domain, how long after greylisting us its
// server let a retry through. Greylisting is per sender and recipient, so
// what carries over to new addresses is the delay: a first retry at it
// spends no session on a retry the server would defer again.
type GreyFacts interface {
	GreyDelay(ctx context.Context, domain string) (time.Duration, bool)
	KeepGreyDelay(ctx context.Context, domain string, d time.Duration)
}

// greyDelay is the wait before t's next attempt: GreyDelay's back-off, or
// for a live batch's first retry at a domain whose delay grey knows and is
// longer, that delay.
func (s stepper) greyDelay(ctx context.Context, t task) time.Duration {
	d := GreyDelay(s.greyBackoff, t.attempt+1, t.test)
	if t.attempt == 0 && !t.test && s.grey != nil && t.group.Domain != "" {
		if learned, ok := s.grey.GreyDelay(ctx, t.group.Domain); ok && learned > d {
			d = learned
		}
	}
	return d
}

// learnGrey remembers the wait that let a live retry through: some item
// of a retried group (attempt > 0) got an answer other than greylisted
// after waiting t.waited since the group's first deferral.
func (s stepper) learnGrey(ctx context.Context, t task, rs []evs.Result) {
	if t.attempt == 0 || t.test || s.grey == nil || t.group.Domain == "" {
		return
	}
	if slices.ContainsFunc(rs, func(res evs.Result) bool {
		return !res.Decision.Cached && res.Decision.Checks.SMTP.Code != 0 && res.Decision.Checks.SMTP.Result != evs.SMTPGreylisted
	}) {
		s.grey.KeepGreyDelay(ctx, t.group.Domain, t.waited)
	}
}

// gateNow is the gate's clock, which its times (until) are on.
func (s stepper) gateNow() time.Time {
	if s.gate != nil && s.gate.Now != nil {
		return s.gate.Now()
	}
	return time.Now()
}

// until is how long from now, on the gate's clock, t is.
func (s stepper) until(t time.Time) time.Duration {
	if s.gate != nil {
		return s.gate.Until(t)
	}
	return max(time.Until(t), 0)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
