package server

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Large bodies are admitted by a budget of bytes, so memory does not grow
// with how many clients send one at once.
//
// A call whose body may be larger than SmallBody takes its size (the
// route's limit when none is given) out of the budget before a byte of it
// is read, and gives it back once its function has answered: what it
// builds from the body is alive until then. In bytes rather than calls, so
// many small bodies still go through together; first come, first served.
// A batch created from an upload takes the upload's size the same way
// (api.Deps.AdmitList).
//
// One account holds at most half the budget (never less than one body of
// the largest size), leaving the other half to everyone else. A call that
// cannot get its share within BodyWait is answered, its body never read:
// 429 for its account's share, 503 for the server's.
const (
	// SmallBody is the largest body read without the budget.
	SmallBody = 64 << 10
	// DefaultBodyBudget is the default of Options.BodyBudget: two batch
	// bodies of the contract's largest size at once.
	DefaultBodyBudget = 2 * api.MaxBatchBody
	// DefaultBodyWait is the default of Options.BodyWait.
	DefaultBodyWait = 20 * time.Second
	// bodyRetryAfter is the Retry-After of a call turned away.
	bodyRetryAfter = 5
)

// bodyGate is the budget of bytes of large bodies in flight.
type bodyGate struct {
	sem    *semaphore.Weighted
	budget int64
	// share is what one account may hold of the budget.
	share int64
	wait  time.Duration

	mu       sync.Mutex
	accounts map[string]*accountShare
}

// accountShare is one account's part of the budget, kept while a call of
// the account holds or waits for some of it.
type accountShare struct {
	sem   *semaphore.Weighted
	users int
}

func newBodyGate(budget int64, wait time.Duration) *bodyGate {
	budget = cmp.Or(max(budget, 0), DefaultBodyBudget)
	wait = cmp.Or(max(wait, 0), DefaultBodyWait)
	share := min(max(budget/2, api.MaxBatchBody), budget)
	return &bodyGate{sem: semaphore.NewWeighted(budget), budget: budget, share: share, wait: wait,
		accounts: map[string]*accountShare{}}
}

// weight is the share of the budget r's body needs on a route accepting
// limit bytes: 0 for a body that is small or cannot be large.
func (bg *bodyGate) weight(r *http.Request, limit int64) int64 {
	if limit <= SmallBody || (r.ContentLength >= 0 && r.ContentLength <= SmallBody) {
		return 0
	}
	n := limit // no length given: it may be as long as the route allows
	if r.ContentLength >= 0 {
		n = min(r.ContentLength, limit)
	}
	return min(n, bg.budget)
}

// errBodyBusy is a large body that could not be admitted in time; its
// account's share is errAccountBusy.
var (
	errBodyBusy    = errors.New("server: the budget of large bodies is spent")
	errAccountBusy = errors.New("server: the account's share of the budget of large bodies is spent")
)

// admit takes n bytes of the budget for account, waiting up to the gate's
// wait or until ctx ends, and returns the function that gives them back.
func (bg *bodyGate) admit(ctx context.Context, account string, n int64) (release func(), err error) {
	if n == 0 {
		return func() {}, nil
	}
	own := bg.join(account)
	mine := min(n, bg.share)
	ctx, cancel := context.WithTimeout(ctx, bg.wait)
	defer cancel()
	if !own.sem.TryAcquire(mine) {
		if err := own.sem.Acquire(ctx, mine); err != nil {
			bg.leave(account)
			return nil, errAccountBusy
		}
	}
	if !bg.sem.TryAcquire(n) {
		if err := bg.sem.Acquire(ctx, n); err != nil {
			own.sem.Release(mine)
			bg.leave(account)
			return nil, errBodyBusy
		}
	}
	return func() {
		bg.sem.Release(n)
		own.sem.Release(mine)
		bg.leave(account)
	}, nil
}

// join is account's share, made when none of its calls holds one.
func (bg *bodyGate) join(account string) *accountShare {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	a := bg.accounts[account]
	if a == nil {
		a = &accountShare{sem: semaphore.NewWeighted(bg.share)}
		bg.accounts[account] = a
	}
	a.users++
	return a
}

// leave forgets account's share once no call of it holds or waits for
// any, so the map holds only the accounts sending large bodies now.
func (bg *bodyGate) leave(account string) {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if a := bg.accounts[account]; a != nil {
		if a.users--; a.users == 0 {
			delete(bg.accounts, account)
		}
	}
}

// admitList is api.Deps.AdmitList: a list of size bytes read from an
// upload takes its size, up to the whole budget, as a body would.
func (bg *bodyGate) admitList(ctx context.Context, size int64) (func(), error) {
	n := int64(0)
	if size > SmallBody {
		n = min(size, bg.budget)
	}
	release, err := bg.admit(ctx, api.CallFromContext(ctx).AccountID, n)
	if errors.Is(err, errAccountBusy) {
		return nil, &store.LimitError{Retry: bodyRetryAfter * time.Second,
			Err: evs.Errorf(evs.CodeRateLimited, "This account is reading as many large lists at once as its share of the server allows; retry after Retry-After seconds.")}
	}
	if err != nil {
		return nil, &api.BusyError{RetryAfter: strconv.Itoa(bodyRetryAfter),
			Err: evs.Errorf(evs.CodeUnavailable, "The server is reading as many large lists as it can hold; retry after Retry-After seconds.")}
	}
	return release, nil
}

// writeBodyBusy answers a call whose large body was not admitted (err
// from admit), before reading it (refuseEarly).
func writeBodyBusy(w http.ResponseWriter, r *http.Request, err error, rid string) {
	defer refuseEarly(w, r)()
	w.Header().Set("Retry-After", strconv.Itoa(bodyRetryAfter))
	if errors.Is(err, errAccountBusy) {
		writeError(w, http.StatusTooManyRequests, evs.CodeRateLimited,
			"This account is sending as many large request bodies at once as its share of the server allows; retry after Retry-After seconds.", rid)
		return
	}
	writeError(w, http.StatusServiceUnavailable, evs.CodeUnavailable,
		"The server is reading as many large request bodies as it can hold; retry after Retry-After seconds.", rid)
}
