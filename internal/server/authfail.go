package server

import (
	"container/list"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// failLimiter counts failed authentications per client address with a token
// bucket each (rate per second, burst the same), for at most max clients:
// the one that failed least recently is forgotten first.
type failLimiter struct {
	rate  rate.Limit
	burst int
	max   int

	mu      sync.Mutex
	order   *list.List // of *failEntry, most recent failure first
	clients map[string]*list.Element
}

type failEntry struct {
	client string
	lim    *rate.Limiter
}

func newFailLimiter(perSecond float64, clients int) *failLimiter {
	f := newClientLimiter(clients)
	f.rate, f.burst = rate.Limit(perSecond), max(int(perSecond), 1)
	return f
}

// newClientLimiter is a failLimiter for limits that count calls rather
// than failures (take), each client at the rate take is given: the
// publishable keys' per address and per key limits.
func newClientLimiter(max int) *failLimiter {
	return &failLimiter{max: max, order: list.New(), clients: map[string]*list.Element{}}
}

// take spends one of client's calls at r a second in bursts of burst (a
// key's limits may change while it is remembered), or tells how long
// until it has one. A refused call spends nothing.
func (f *failLimiter) take(client string, now time.Time, r rate.Limit, burst int) (time.Duration, bool) {
	if wait, blocked := f.blocked(client, now); blocked {
		return wait, true
	}
	f.spend(client, now, r, burst)
	return 0, false
}

// blocked tells whether client has no failure left to spend at now, and
// how long until it has one.
func (f *failLimiter) blocked(client string, now time.Time) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	el, ok := f.clients[client]
	if !ok {
		return 0, false
	}
	lim := el.Value.(*failEntry).lim
	if lim.TokensAt(now) >= 1 {
		return 0, false
	}
	res := lim.ReserveN(now, 1)
	defer res.CancelAt(now)
	return res.DelayFrom(now), true
}

// fail spends one of client's failures.
func (f *failLimiter) fail(client string, now time.Time) { f.spend(client, now, f.rate, f.burst) }

// spend takes a token from client's bucket, made at r and burst if new.
func (f *failLimiter) spend(client string, now time.Time, r rate.Limit, burst int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	el, ok := f.clients[client]
	if ok {
		f.order.MoveToFront(el)
	} else {
		if f.order.Len() >= f.max {
			oldest := f.order.Back()
			f.order.Remove(oldest)
			delete(f.clients, oldest.Value.(*failEntry).client)
		}
		el = f.order.PushFront(&failEntry{client: client, lim: rate.NewLimiter(r, burst)})
		f.clients[client] = el
	}
	lim := el.Value.(*failEntry).lim
	if lim.Limit() != r || lim.Burst() != burst {
		lim.SetLimitAt(now, r)
		lim.SetBurstAt(now, burst)
	}
	lim.AllowN(now, 1)
}
