// Package batch processes batch verification requests: it groups a batch's
// addresses by domain, verifies each group on as few SMTP connections as
// possible (one DNS lookup and at most one accept-all probe per domain per
// batch), retries greylisted addresses with back-off, and writes results in
// large atomic steps that never count an address twice.
//
// One Worker runs batches in both deployments, on a Queue beneath it: the
// LocalQueue in `evs serve`'s process, SQS in the worker Lambda (package
// sqsqueue).
package batch

import (
	"context"
	"errors"
	"log/slog"
	"sort"
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
	PendingItems(ctx context.Context, accountID, id string, afterSeq, limit int) ([]evs.Item, error)
}

// pendingPage is how many pending items one store call returns.
const pendingPage = 5000

// AllPending returns every item of the batch that has no result yet, in
// seq order, reading the store page by page.
func AllPending(ctx context.Context, s interface {
	PendingItems(ctx context.Context, accountID, id string, afterSeq, limit int) ([]evs.Item, error)
}, accountID, id string) ([]evs.Item, error) {
	var items []evs.Item
	for after := -1; ; {
		page, err := s.PendingItems(ctx, accountID, id, after, pendingPage)
		if err != nil {
			return nil, err
		}
		items = append(items, page...)
		if len(page) < pendingPage {
			return items, nil
		}
		after = page[len(page)-1].Seq
	}
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
	Engine  Verifier
	Sandbox Verifier
	// MaxGreyAttempts is how many times an address is tried before a
	// greylisted answer is final (default 3).
	MaxGreyAttempts int
	// PerConnection caps the recipients one SMTP session asks (default
	// 100): receiving servers limit recipients per transaction, and RFC
	// 5321 (4.5.3.1.8) has every server take at least 100. Below the cap,
	// time sizes a session, not a count: see VerifyGroup.
	PerConnection int
	// SessionLimit bounds each SMTP session of a group (0: none). A session
	// asks addresses while the slowest reply it saw still fits before its
	// limit (or the context's deadline, if sooner); the rest start the
	// next session. A session that runs past it anyway ends, and no further session of the group starts:
	// the answers it received stand, and the addresses it got no answer
	// about (the one in flight, those after it, the rest of the group) are
	// our deadline's, not the mailboxes' (contract, section 16). They are
	// retried at the next attempt, like greylisted ones, and end
	// unknown/timeout only at the last.
	SessionLimit time.Duration
	// Now is the clock of the results the limit writes (default time.Now).
	Now func() time.Time
	// ExitRetry is how long a group waits after our SMTP exit failed
	// before it tries again (default DefaultExitRetry).
	ExitRetry time.Duration
}

// DefaultPerConnection is the default cap on the recipients one SMTP
// session asks (Processor.PerConnection).
const DefaultPerConnection = 100

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

// Outcome is what VerifyGroup did with a group.
type Outcome struct {
	// Results are the verdicts to write.
	Results []evs.Result
	// Retry is the greylisted items, for a later attempt.
	Retry []evs.Item
	// Left is the items no server answered about: out of time, or the
	// provider asked us to slow down (on them, or before they were
	// asked). They run again at the same attempt.
	Left []evs.Item
	// Throttled is true when a session met a 421 or a reply about our
	// rate (verify.Throttled): no further session of the group started,
	// and the items a refused session never asked about are in Left.
	Throttled bool
	// ExitDown is the items no session could ask about because our own
	// SMTP exit failed (verify.ExitDown): no verdict (contract, section
	// 16). They run again at the same attempt once Processor.ExitRetry has passed,
	// until the batch's deadline; no further session of the group started.
	ExitDown []evs.Item
}

// DefaultExitRetry is how long work waits, by default, after our SMTP
// exit failed before it tries again (Processor.ExitRetry).
const DefaultExitRetry = 30 * time.Second

// VerifyGroup runs one group's SMTP sessions and sorts what came back
// (Outcome): verdicts to write, greylisted items to retry at the next
// attempt (before the last one they give no result), and items left
// unanswered, which the caller must run again. It starts no session at or
// after startBy (the zero time: no limit), so that a worker with a deadline
// can write what it finished before it is stopped. Throttled tells the
// caller to pause the provider for every worker.
func (p *Processor) VerifyGroup(ctx context.Context, startBy time.Time, test bool, mode evs.Mode, g Group, attempt int) (o Outcome, err error) {
	v := p.Engine
	if test {
		v = p.Sandbox
	}
	if v == nil {
		return o, errors.New("batch: no verifier")
	}
	maxGrey := p.MaxGreyAttempts
	if maxGrey <= 0 {
		maxGrey = 3
	}
	// Sessions are sized by time: each takes up to PerConnection of the
	// addresses not yet asked, and the engine asks them while the
	// session's time (SessionLimit, and the context's deadline) holds
	// another reply (verify.AskUntil); those it leaves unasked start the
	// next session. The RCPT commands the caller reserved for the group
	// (RcptBound) bound them too: each session costs its addresses and at
	// most one accept-all probe, and what the reservation no longer
	// covers is left, to be admitted again.
	per := p.perConnection()
	budget := p.RcptBound(len(g.Items))
	rest := g.Items
	for len(rest) > 0 {
		n := min(per, len(rest), budget-1)
		if n < 1 || (!startBy.IsZero() && !time.Now().Before(startBy)) {
			o.Left = append(o.Left, rest...)
			break
		}
		chunk, after := rest[:n], rest[n:]
		emails := make([]string, len(chunk))
		for i, it := range chunk {
			emails[i] = it.Email
		}
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if p.SessionLimit > 0 {
			sctx, cancel = context.WithTimeout(ctx, p.SessionLimit)
		}
		dl, limited := sctx.Deadline()
		if limited {
			sctx = verify.AskUntil(sctx, dl)
		}
		ds := v.VerifyDomain(sctx, emails, mode)
		// The connection's deadline is the context's own, so the engine
		// can return an instant before the context's timer marks it done:
		// the clock says whether the limit was reached.
		timedOut := sctx.Err() != nil || (limited && !time.Now().Before(dl))
		cancel()
		if ctx.Err() != nil {
			// Cut short (cancel, shutdown): these verdicts are artefacts of
			// our deadline, not facts about the mailboxes. Leave them for
			// the next run.
			return Outcome{Results: o.Results}, ctx.Err()
		}
		throttled, refused := throttledSession(test, ds)
		if refused {
			// The session was refused before any RCPT: nothing was asked,
			// so the chunk is run again once the provider's pause is over,
			// at the same attempt.
			o.Left, o.Throttled = append(o.Left, rest...), true
			break
		}
		var unanswered, unasked []evs.Item
		exitDown := false
		for i, d := range ds {
			switch {
			case verify.ExitDown(d.Checks.SMTP):
				o.ExitDown, exitDown = append(o.ExitDown, chunk[i]), true
			case timedOut && d.Checks.SMTP.Code == 0:
				// No reply before our time limit: the limit's, not a
				// fact about the mailbox.
				unanswered = append(unanswered, chunk[i])
			case verify.Unasked(d.Checks.SMTP):
				// The session's time would not hold its reply: never
				// asked, it goes to the next session.
				unasked = append(unasked, chunk[i])
			case throttled && throttledAddress(d):
				// Throttled on it or before it: no answer about the
				// mailbox. It waits for the provider's pause, at the same
				// attempt, instead of ending unknown.
				o.Left = append(o.Left, chunk[i])
			case d.Reason == evs.ReasonGreylisted && attempt+1 < maxGrey:
				o.Retry = append(o.Retry, chunk[i])
			default:
				o.Results = append(o.Results, evs.Result{Seq: chunk[i].Seq, Email: chunk[i].Email, Decision: d})
			}
		}
		// What the session sent: its asked addresses, and the accept-all
		// probe, which follows an accepted address only.
		budget -= len(chunk) - len(unasked)
		for _, d := range ds {
			if d.Checks.SMTP.CatchAll != "" {
				budget--
				break
			}
		}
		if exitDown {
			// The exit is down for the group's other sessions too.
			o.ExitDown = append(o.ExitDown, unasked...)
			o.ExitDown = append(o.ExitDown, after...)
			break
		}
		if timedOut {
			// The answers received stand; the rest of the group is not
			// asked on a server that ran past the limit once. It is tried
			// again at the next attempt, and ends unknown/timeout only at
			// the last.
			unanswered = append(append(unanswered, unasked...), after...)
			if attempt+1 < maxGrey {
				o.Retry = append(o.Retry, unanswered...)
			} else {
				now := time.Now
				if p.Now != nil {
					now = p.Now
				}
				o.Results = append(o.Results, TimeoutResults(unanswered, mode, test, DetailSession, now())...)
			}
			o.Throttled = throttled
			break
		}
		if throttled {
			o.Left, o.Throttled = append(append(o.Left, unasked...), after...), true
			break
		}
		if len(unasked) == len(chunk) {
			// Not even one reply fitted: no session would do better now.
			o.Left = append(o.Left, rest...)
			break
		}
		rest = append(unasked, after...)
	}
	sort.Slice(o.Results, func(i, j int) bool { return o.Results[i].Seq < o.Results[j].Seq })
	return o, nil
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

// TestBackoff is every retry delay of a test-mode batch (contract, section
// 8): the retries still happen, and show, but an integration test that asks
// for greylisted@… finishes in seconds instead of waiting out minutes.
const TestBackoff = time.Second

// GreyDelay returns the delay before retry attempt n (1-based) of a batch's
// greylisted addresses: Backoff(base, n) for a live account, TestBackoff for
// a test-mode one.
func GreyDelay(base time.Duration, n int, test bool) time.Duration {
	if test {
		return TestBackoff
	}
	return Backoff(base, n)
}

// Backoff returns the delay before retry attempt n (1-based) of greylisted
// addresses: greylisting servers accept a retry after minutes, not seconds.
func Backoff(base time.Duration, n int) time.Duration {
	if base <= 0 {
		base = 5 * time.Minute
	}
	return politeness.Double(base, 0, n-1)
}

func logErr(l *slog.Logger, msg string, b evs.Batch, err error) {
	l.Error(msg, slog.String("batchId", b.ID), slog.String("accountId", b.AccountID), slog.String("error", err.Error()))
}

// RcptBound is the most RCPT commands a group of n addresses sends: one
// per address, and at most one accept-all probe per session (the engine
// sends it only when an address was accepted and the domain's answer is
// not known to the engine's domain facts), with a session per PerConnection
// addresses. Sessions cut short by time do not raise it: VerifyGroup spends
// no more than it, and leaves what it does not cover for a new admission.
func (p *Processor) RcptBound(n int) int {
	if n <= 0 {
		return 0
	}
	per := p.perConnection()
	return n + (n+per-1)/per
}

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

// Fit splits a group larger than a whole RCPT window's budget (limit
// commands) into the part that may run now and the rest, which runs in a
// later window: at least one address runs, so that a budget below one
// address's RCPT commands still lets the group through, one by one.
func (p *Processor) Fit(items []evs.Item, limit int) (run, rest []evs.Item) {
	if p.RcptBound(len(items)) <= limit {
		return items, nil
	}
	n := max(p.ItemsWithin(limit), 1)
	return items[:n], items[n:]
}

func (p *Processor) perConnection() int {
	if p.PerConnection <= 0 {
		return DefaultPerConnection
	}
	return p.PerConnection
}
