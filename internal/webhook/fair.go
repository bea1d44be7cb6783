package webhook

import (
	"sync"

	"github.com/evs-dev/evs/internal/evs"
)

// Deliveries of `evs serve` share a pool of attempt slots between accounts
// in round-robin order, an account holding at most perAccount at once: an
// attempt to a receiver that never answers holds its slot for 10 s, and
// one account's such receiver must not fill every slot.

// Defaults of Deliverer.Slots and Deliverer.PerAccount.
const (
	DefaultSlots      = 16
	DefaultPerAccount = 4
)

// fairQueue holds the due deliveries the loop knows of, per account, and
// starts them in fair order while slots are free.
type fairQueue struct {
	mu         sync.Mutex
	slots      int
	perAccount int
	// maxQueued bounds what one account may have queued or in flight: the
	// store lists at most that many of it, and more would only wait.
	maxQueued int
	busy      int
	accounts  []*accountDeliveries
	next      int // index in accounts of the account served next
	known     map[string]bool
	start     func(evs.Delivery)
}

// accountDeliveries is one account's known due deliveries.
type accountDeliveries struct {
	id       string
	ready    []evs.Delivery
	inflight int
}

func newFairQueue(slots, perAccount int, start func(evs.Delivery)) *fairQueue {
	slots, perAccount = max(1, slots), max(1, perAccount)
	return &fairQueue{slots: slots, perAccount: min(perAccount, slots), maxQueued: 2 * perAccount,
		known: map[string]bool{}, start: start}
}

func deliveryKey(d evs.Delivery) string { return d.AccountID + "/" + d.BatchID }

// add queues due deliveries not already queued or in flight.
func (q *fairQueue) add(list []evs.Delivery) {
	q.mu.Lock()
	for _, d := range list {
		k := deliveryKey(d)
		if q.known[k] {
			continue
		}
		a := q.account(d.AccountID)
		if len(a.ready)+a.inflight >= q.maxQueued {
			continue
		}
		q.known[k] = true
		a.ready = append(a.ready, d)
	}
	q.mu.Unlock()
	q.dispatch()
}

// account returns the queue of id, adding it at the end of the ring; the
// caller holds mu.
func (q *fairQueue) account(id string) *accountDeliveries {
	for _, a := range q.accounts {
		if a.id == id {
			return a
		}
	}
	a := &accountDeliveries{id: id}
	q.accounts = append(q.accounts, a)
	return a
}

// done gives back the slot of a finished attempt and starts the next ones.
func (q *fairQueue) done(d evs.Delivery) {
	q.mu.Lock()
	q.busy--
	delete(q.known, deliveryKey(d))
	for i, a := range q.accounts {
		if a.id != d.AccountID {
			continue
		}
		a.inflight--
		if a.inflight == 0 && len(a.ready) == 0 {
			q.accounts = append(q.accounts[:i], q.accounts[i+1:]...)
			if q.next > i {
				q.next--
			}
		}
		break
	}
	q.mu.Unlock()
	q.dispatch()
}

// dispatch starts queued deliveries while slots are free.
func (q *fairQueue) dispatch() {
	for {
		q.mu.Lock()
		d, ok := q.pick()
		q.mu.Unlock()
		if !ok {
			return
		}
		q.start(d)
	}
}

// pick takes the next delivery in round-robin order among the accounts
// under their cap, and counts its slot; the caller holds mu.
func (q *fairQueue) pick() (evs.Delivery, bool) {
	if q.busy >= q.slots || len(q.accounts) == 0 {
		return evs.Delivery{}, false
	}
	if q.next >= len(q.accounts) {
		q.next = 0
	}
	for i := range q.accounts {
		ai := (q.next + i) % len(q.accounts)
		a := q.accounts[ai]
		if a.inflight >= q.perAccount || len(a.ready) == 0 {
			continue
		}
		d := a.ready[0]
		a.ready = a.ready[1:]
		a.inflight++
		q.busy++
		q.next = ai + 1
		return d, true
	}
	return evs.Delivery{}, false
}
