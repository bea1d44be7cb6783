package api

import (
	"net/http"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// A heavy read (Route.Heavy) reads an amount of an account's data that
// grows with the account, holding one of `evs serve`'s few SQLite readers
// as long. readGate admits a bounded number at once, in all and per
// account, so one account's reads never take the readers every other
// account needs: past its account's bound a read is 429, past the server's
// 503, at once and with Retry-After.
type readGate struct {
	total, perAccount int

	mu     sync.Mutex
	busy   int
	byAcct map[string]int
}

// HeavyReadsPerAccount is how many heavy reads one account may run at
// once (fewer when the server's bound is lower).
const HeavyReadsPerAccount = 2

// readRetryAfter is the Retry-After of a heavy read turned away: a large
// one takes seconds.
const readRetryAfter = 5 * time.Second

func newReadGate(total int) *readGate {
	if total <= 0 {
		return nil
	}
	return &readGate{total: total, perAccount: min(HeavyReadsPerAccount, total), byAcct: map[string]int{}}
}

// admit takes a place for one heavy read of accountID's; release gives it
// back. A nil gate bounds nothing.
func (g *readGate) admit(accountID string) (release func(), err error) {
	if g == nil {
		return func() {}, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.byAcct[accountID] >= g.perAccount:
		return nil, &store.LimitError{Retry: readRetryAfter, Err: evs.Errorf(evs.CodeRateLimited,
			"An account runs at most %d exports, CSV lists and reports at once; retry after Retry-After seconds.", g.perAccount)}
	case g.busy >= g.total:
		return nil, &BusyError{RetryAfter: "5", Err: evs.Errorf(evs.CodeUnavailable,
			"The server runs at most %d exports, CSV lists and reports at once; retry after Retry-After seconds.", g.total)}
	}
	g.busy++
	g.byAcct[accountID]++
	return sync.OnceFunc(func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.busy--
		if g.byAcct[accountID]--; g.byAcct[accountID] <= 0 {
			delete(g.byAcct, accountID)
		}
	}), nil
}

// everyCall is the Route.Heavy of a route whose every call is heavy.
func everyCall(*http.Request) bool { return true }

// asksCSV is the Route.Heavy of the results route: a page of JSON reads
// a bounded number of results, the list as CSV all of them.
func asksCSV(r *http.Request) bool {
	vs := r.Header.Values("Accept")
	return len(vs) > 0 && wantsCSV(vs[len(vs)-1])
}
