package api

import (
	"sync"

	"github.com/evs-dev/evs/internal/evs"
)

// A CSV list (results as text/csv, an export) is built whole before it is
// sent or stored: a million rows are about 100 MB. csvGate bounds how many
// are built at once, in all and per account, so that a storm of exports
// from one account cannot take the memory every other account's calls
// need (contract, section 16). A call past the bound is answered 503
// unavailable with Retry-After, safe to retry. One Lambda instance serves
// one call at a time, so only `evs serve` sets a bound.
type csvGate struct {
	total, perAccount int

	mu     sync.Mutex
	busy   int
	byAcct map[string]int
}

// csvRetryAfter is the Retry-After, in seconds, of a list refused for
// lack of room: a large list takes seconds to build.
const csvRetryAfter = "5"

func newCSVGate(total int) *csvGate {
	if total <= 0 {
		return nil
	}
	return &csvGate{total: total, perAccount: max(1, total/4), byAcct: map[string]int{}}
}

// acquire takes a place for one list of accountID's; release gives it
// back. A nil gate bounds nothing.
func (g *csvGate) acquire(accountID string) (release func(), err error) {
	if g == nil {
		return func() {}, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy >= g.total || g.byAcct[accountID] >= g.perAccount {
		return nil, &BusyError{Err: evs.Errorf(evs.CodeUnavailable,
			"The server builds at most %d CSV lists at once (%d for one account); retry in %s s.", g.total, g.perAccount, csvRetryAfter), RetryAfter: csvRetryAfter}
	}
	g.busy++
	g.byAcct[accountID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.busy--
			if g.byAcct[accountID]--; g.byAcct[accountID] <= 0 {
				delete(g.byAcct, accountID)
			}
		})
	}, nil
}
