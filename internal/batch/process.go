// Package batch processes batch verification requests: it groups a batch's
// addresses by domain, verifies each group on as few SMTP connections as
// possible, retries greylisted addresses with back-off, and writes results
// in atomic steps that never count an address twice. One Worker runs
// batches in both deployments, on the LocalQueue or SQS.
package batch

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/verify"
)

// Store is the part of the store batch processing uses.
type Store interface {
	Batch(ctx context.Context, accountID, id string) (evs.Batch, error)
	TransitionBatch(ctx context.Context, accountID, id string, from []evs.State, to evs.State, errMsg string, now time.Time) (evs.Batch, error)
	PutResults(ctx context.Context, accountID, id string, results []evs.Result, now time.Time) (evs.Batch, error)
	InputItems(ctx context.Context, accountID, id string, from, limit int) ([]evs.Item, int, error)
	// WithoutResults returns the given items that have no result yet: a
	// redelivered message or a second plan never asks a mail server
	// about an address twice.
	WithoutResults(ctx context.Context, accountID, id string, items []evs.Item) ([]evs.Item, error)
}

// pendingPage is how many items one store call returns.
const pendingPage = 5000

// AllPending returns every item of the batch that has no result yet, in
// plan order, reading the input page by page.
func AllPending(ctx context.Context, s Store, accountID, id string) ([]evs.Item, error) {
	var items []evs.Item
	for from := 0; from >= 0; {
		page, next, err := s.InputItems(ctx, accountID, id, from, pendingPage)
		if err != nil {
			return nil, err
		}
		if page, err = s.WithoutResults(ctx, accountID, id, page); err != nil {
			return nil, err
		}
		items, from = append(items, page...), next
	}
	return items, nil
}

// Accounts tells whether an account is in test mode.
type Accounts interface {
	Account(ctx context.Context, id string) (evs.Account, error)
}

// Verifier verifies addresses of one domain together. The engine and the
// sandbox implement it.
type Verifier interface {
	VerifyDomain(ctx context.Context, emails []string, mode evs.Mode) []evs.Decision
}

// Processor verifies groups of items and turns decisions into results.
type Processor struct {
	Engine          Verifier
	Sandbox         Verifier
	MaxGreyAttempts int // tries before a greylisted answer is final (default 3)
	// PerConnection caps the recipients one SMTP session asks (default
	// 100): RFC 5321 has every server take at least 100. Below the cap,
	// time sizes a session, not a count.
	PerConnection int
	// SessionLimit bounds each SMTP session of a group (0: none). A session
	// that runs past it (a server that stalls) ends, and no further session
	// of the group starts: the addresses it got no answer about are our
	// deadline's, not the mailboxes', so they are retried at the next
	// attempt and end unknown/timeout only at the last.
	SessionLimit time.Duration
	// GroupSessions is the most sessions one group runs at once (default
	// 1) when its caller gives it more slots: a large group at a slow
	// server is then done, and billed, in a fraction of the time.
	GroupSessions int
	Now           func() time.Time // clock of the timeout results (default time.Now)
	ExitRetry     time.Duration    // wait after our SMTP exit failed (default DefaultExitRetry)
}

// DefaultPerConnection is the default Processor.PerConnection.
const DefaultPerConnection = politeness.SessionAddresses

// Group is items of one domain.
type Group struct {
	Domain string
	Items  []evs.Item
}

// GroupByDomain splits items by domain, keeping submission order inside a
// group and ordering groups by their first item. Items with no domain
// (invalid syntax) each form their own group: nothing connects them.
func GroupByDomain(items []evs.Item) []Group {
	idx := map[string]int{}
	var gs []Group
	for _, it := range items {
		if it.Domain == "" {
			gs = append(gs, Group{Items: []evs.Item{it}})
			continue
		}
		i, ok := idx[it.Domain]
		if !ok {
			i = len(gs)
			idx[it.Domain] = i
			gs = append(gs, Group{Domain: it.Domain})
		}
		gs[i].Items = append(gs[i].Items, it)
	}
	return gs
}

// Outcome is what VerifyGroupWith did with a group.
type Outcome struct {
	Results []evs.Result // verdicts to write
	Retry   []evs.Item   // greylisted, for a later attempt
	// Left is the items no server answered about (out of time, or the
	// provider asked us to slow down); they run again at the same attempt.
	Left []evs.Item
	// Throttled is true when a session met a 421 or a reply about our
	// rate: no further session of the group started.
	Throttled bool
	// ExitDown is the items no session could ask because our own SMTP exit
	// failed: no verdict; they run again at the same attempt after
	// Processor.ExitRetry.
	ExitDown []evs.Item
}

// DefaultExitRetry is the default Processor.ExitRetry.
const DefaultExitRetry = 30 * time.Second

// SlotFunc takes a session slot for one more session of a group at once
// (politeness.Gate.ExtraSlot); ok is false when none is free now.
type SlotFunc func(ctx context.Context) (release func(), ok bool)

// VerifyGroupWith runs one group's SMTP sessions and sorts what came back
// (Outcome). It starts no session at or after startBy (zero: no limit), so
// a worker with a deadline can write what it finished before it is stopped.
//
// Sessions are sized by time: each takes up to PerConnection addresses and
// asks them while its time holds another reply (verify.AskUntil); the rest
// go to the next session. The group's RCPT reservation (RcptBound) bounds
// them too; what it no longer covers is left, to be admitted again. With
// extra set, up to GroupSessions sessions share the group at once.
func (p *Processor) VerifyGroupWith(ctx context.Context, startBy time.Time, test bool, mode evs.Mode, g Group, attempt int, extra SlotFunc) (Outcome, error) {
	v := p.Engine
	if test {
		v = p.Sandbox
	}
	if v == nil {
		return Outcome{}, errors.New("batch: no verifier")
	}
	r := &groupRun{p: p, v: v, test: test, mode: mode, attempt: attempt, startBy: startBy,
		maxGrey: p.MaxGreyAttempts, per: p.perConnection(), queue: g.Items, budget: p.RcptBound(len(g.Items))}
	r.maxGrey = positiveOr(r.maxGrey, 3)
	r.cond = sync.NewCond(&r.mu)
	var wg sync.WaitGroup
	runners := 1
	if extra != nil {
		runners = min(max(p.GroupSessions, 1), (len(g.Items)+r.per-1)/r.per)
	}
	for i := 1; i < runners; i++ {
		release, ok := extra(ctx)
		if !ok {
			break
		}
		wg.Go(func() {
			defer release()
			r.run(ctx)
		})
	}
	r.run(ctx)
	wg.Wait()
	if ctx.Err() != nil {
		// Cut short (cancel, shutdown): the verdicts of the sessions under
		// way are artefacts of our deadline, not facts about the
		// mailboxes. Leave them for the next run.
		rs := r.o.Results
		sort.Slice(rs, func(i, j int) bool { return rs[i].Seq < rs[j].Seq })
		return Outcome{Results: rs}, ctx.Err()
	}
	o := r.o
	unanswered := r.unanswered
	switch r.stop {
	case stopExitDown:
		// The exit is down for the group's other sessions too.
		o.ExitDown = append(o.ExitDown, r.queue...)
	case stopTimedOut:
		// The answers received stand; the rest of the group is not asked
		// on a server that ran past the limit once.
		unanswered = append(unanswered, r.queue...)
	default:
		o.Left = append(o.Left, r.queue...)
	}
	if len(unanswered) > 0 {
		// Tried again at the next attempt; unknown/timeout only at the
		// last.
		if attempt+1 < r.maxGrey {
			o.Retry = append(o.Retry, unanswered...)
		} else {
			o.Results = append(o.Results, TimeoutResults(unanswered, mode, test, DetailSession, evs.Now(p.Now))...)
		}
	}
	sort.Slice(o.Results, func(i, j int) bool { return o.Results[i].Seq < o.Results[j].Seq })
	return o, nil
}

// Why a group's sessions stopped before its addresses were all asked, by
// precedence: what is still unasked then goes where the strongest says.
const (
	goOn          = iota
	stopLeft      // out of time to start, or of RCPT reservation: Left, same attempt
	stopThrottled // the server asked us to slow down: Left, after the pause
	stopTimedOut  // a session ran past its limit: the next attempt
	stopExitDown  // our SMTP exit failed: ExitDown
)

// groupRun is one group's sessions, one runner per session at once.
type groupRun struct {
	p       *Processor
	v       Verifier
	test    bool
	mode    evs.Mode
	attempt int
	maxGrey int
	per     int
	startBy time.Time

	mu         sync.Mutex
	cond       *sync.Cond
	queue      []evs.Item // addresses no session asked yet
	budget     int        // RCPT commands not spent (a session under way holds its worst case)
	inflight   int        // sessions under way
	stop       int
	o          Outcome
	unanswered []evs.Item
}

// run runs sessions until the group's addresses are asked or a stop.
func (r *groupRun) run(ctx context.Context) {
	for {
		chunk, ok := r.take()
		if !ok {
			return
		}
		r.session(ctx, chunk)
	}
}

// take hands out the next session's addresses; it waits while the queue is
// empty and sessions under way may give some back.
func (r *groupRun) take() ([]evs.Item, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.stop == goOn && len(r.queue) == 0 && r.inflight > 0 {
		r.cond.Wait()
	}
	if r.stop != goOn || len(r.queue) == 0 {
		return nil, false
	}
	n := min(r.per, len(r.queue), r.budget-1)
	if n < 1 || (!r.startBy.IsZero() && !time.Now().Before(r.startBy)) {
		r.stop = max(r.stop, stopLeft)
		r.cond.Broadcast()
		return nil, false
	}
	chunk := r.queue[:n:n]
	r.queue = r.queue[n:]
	r.budget -= n + 1 // its addresses and an accept-all probe, at most
	r.inflight++
	return chunk, true
}

// session runs one SMTP session on chunk and sorts its decisions.
func (r *groupRun) session(ctx context.Context, chunk []evs.Item) {
	emails := make([]string, len(chunk))
	for i, it := range chunk {
		emails[i] = it.Email
	}
	sctx, cancel := ctx, context.CancelFunc(func() {})
	if r.p.SessionLimit > 0 {
		sctx, cancel = context.WithTimeout(ctx, r.p.SessionLimit)
	}
	dl, limited := sctx.Deadline()
	if limited {
		sctx = verify.AskUntil(sctx, dl)
	}
	ds := r.v.VerifyDomain(sctx, emails, r.mode)
	// The connection's deadline is the context's own, so the engine can
	// return an instant before the context's timer marks it done: the
	// clock says whether the limit was reached.
	timedOut := sctx.Err() != nil || (limited && !time.Now().Before(dl))
	cancel()

	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.cond.Broadcast()
	r.inflight--
	if ctx.Err() != nil {
		r.stop = max(r.stop, stopLeft) // the caller keeps only what came before
		return
	}
	throttled, refused := throttledSession(r.test, ds)
	if refused {
		// Refused before any RCPT: nothing was asked, so the chunk runs
		// again once the provider's pause is over, at the same attempt.
		r.queue = append(chunk, r.queue...)
		r.budget += len(chunk) + 1
		r.o.Throttled, r.stop = true, max(r.stop, stopThrottled)
		return
	}
	var unasked []evs.Item
	reason := goOn
	for i, d := range ds {
		switch {
		case verify.ExitDown(d.Checks.SMTP):
			r.o.ExitDown, reason = append(r.o.ExitDown, chunk[i]), stopExitDown
		case timedOut && d.Checks.SMTP.Code == 0:
			// No reply before our time limit: the limit's, not a fact
			// about the mailbox.
			r.unanswered = append(r.unanswered, chunk[i])
		case verify.Unasked(d.Checks.SMTP):
			// The session's time would not hold its reply: never asked,
			// it goes to the next session.
			unasked = append(unasked, chunk[i])
		case throttled && throttledAddress(d):
			// No answer about the mailbox: it waits out the provider's
			// pause instead of ending unknown.
			r.o.Left = append(r.o.Left, chunk[i])
		case d.Reason == evs.ReasonGreylisted && r.attempt+1 < r.maxGrey:
			r.o.Retry = append(r.o.Retry, chunk[i])
		case !r.test && r.attempt == 0 && r.attempt+1 < r.maxGrey && catchAllLater(d.Checks.SMTP):
			// The accept-all probe got a temporary answer: a later session
			// asks both again before the verdict falls back to accept-all.
			r.o.Retry = append(r.o.Retry, chunk[i])
		default:
			r.o.Results = append(r.o.Results, evs.Result{Seq: chunk[i].Seq, Email: chunk[i].Email, Decision: d})
		}
	}
	// What the session did not send goes back to the reservation: the
	// addresses it left unasked, and the accept-all probe unless an
	// accepted address called for it.
	r.budget += len(unasked) + 1
	for _, d := range ds {
		if d.Checks.SMTP.CatchAll != "" {
			r.budget--
			break
		}
	}
	switch {
	case reason == stopExitDown:
	case timedOut:
		reason = stopTimedOut
	case throttled:
		reason = stopThrottled
	case len(unasked) == len(chunk):
		// Not even one reply fitted: no session would do better now.
		reason = stopLeft
	}
	r.o.Throttled = r.o.Throttled || throttled
	r.queue = append(unasked, r.queue...)
	r.stop = max(r.stop, reason)
}

// catchAllLater tells whether c is an accepted mailbox whose accept-all
// probe got an answer that another session may not give: a temporary one
// or none in time.
func catchAllLater(c evs.SMTPCheck) bool {
	return c.AcceptAllUnknown() && (c.CatchAll == evs.SMTPGreylisted || c.CatchAll == evs.SMTPTimeout)
}

// throttledAddress tells whether a decision carries no answer about its
// mailbox because the server throttled the session: the throttling reply
// itself, or an address asked after it never was.
func throttledAddress(d evs.Decision) bool {
	t, _ := verify.Throttled(d.Checks.SMTP)
	return t || verify.NotAsked(d.Checks.SMTP)
}

// throttledSession tells whether a live session's decisions show a
// throttling reply, and whether the session was refused at its start (every
// decision then carries the refusal).
func throttledSession(test bool, ds []evs.Decision) (throttled, refused bool) {
	if test || len(ds) == 0 {
		return false, false
	}
	refused = true
	for _, d := range ds {
		t, atOpen := verify.Throttled(d.Checks.SMTP)
		throttled = throttled || t
		refused = refused && t && atOpen
	}
	return throttled, refused
}

// TestBackoff is every retry delay of a test-mode batch: the retries still
// happen, but an integration test finishes in seconds, not minutes.
const TestBackoff = time.Second

// GreyDelay returns the delay before greylist retry attempt n (1-based):
// Backoff for a live account, TestBackoff for a test-mode one.
func GreyDelay(base time.Duration, n int, test bool) time.Duration {
	if test {
		return TestBackoff
	}
	return Backoff(base, n)
}

// Backoff returns the delay before retry attempt n (1-based) of greylisted
// addresses: greylisting servers accept a retry after minutes, not seconds.
func Backoff(base time.Duration, n int) time.Duration {
	base = positiveOr(base, 5*time.Minute)
	return politeness.Double(base, 0, n-1)
}

// RcptBound is the most RCPT commands a group of n addresses sends: one
// per address and at most one accept-all probe per session of
// PerConnection. VerifyGroupWith never spends more.
func (p *Processor) RcptBound(n int) int { return politeness.Rcpts(n, p.perConnection()) }

// ItemsWithin is the most addresses of a group whose RcptBound fits in
// budget RCPT commands.
func (p *Processor) ItemsWithin(budget int) int {
	per := p.perConnection()
	// n + ceil(n/per) <= budget  ⇐  n = budget - ceil(budget/(per+1))
	n := budget - (budget+per)/(per+1)
	for n > 0 && p.RcptBound(n) > budget {
		n--
	}
	return max(n, 0)
}

func (p *Processor) perConnection() int { return positiveOr(p.PerConnection, DefaultPerConnection) }
