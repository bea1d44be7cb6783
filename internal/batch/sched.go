package batch

import (
	"slices"
	"sync"
)

// The LocalQueue shares its slots between tenants. A slot runs one
// delivery (for work, one domain group of a batch). A free slot goes to the
// next account in round-robin order, and inside it to its next batch in
// round-robin order: an account with one batch gets as many slots as one
// with ten. Test-mode work has a lane of its own, so it never waits behind
// SMTP work.
//
// Slots cannot be taken back, so round-robin alone would let an account
// that came first fill every slot with sessions to a server that never
// answers: an account holds at most perAccount slots of a lane, and a batch
// at most perBatch.

// delivery is a message on its way to the Worker; fails counts the
// handlings of it that failed, lane is the lane it was pushed to.
type delivery struct {
	m     Message
	fails int
	lane  *lane
}

// lane is one pool of slots and the queues that feed it.
type lane struct {
	mu         sync.Mutex
	slots      int
	perAccount int
	perBatch   int
	busy       int
	accounts   []*accountQueue
	next       int // index in accounts of the account served next
	start      func(delivery)
}

// accountQueue is one account's batches that have deliveries in a lane.
type accountQueue struct {
	id       string
	batches  []*batchQueue
	next     int
	inflight int
}

// batchQueue is one batch's deliveries in a lane.
type batchQueue struct {
	id       string
	ready    []delivery
	inflight int
}

func newLane(slots, perAccount, perBatch int, start func(delivery)) *lane {
	return &lane{slots: slots, perAccount: max(1, perAccount), perBatch: max(1, perBatch), start: start}
}

// push queues d and starts what the free slots allow.
func (l *lane) push(d delivery) {
	l.mu.Lock()
	i := slices.IndexFunc(l.accounts, func(x *accountQueue) bool { return x.id == d.m.AccountID })
	if i < 0 {
		i = len(l.accounts)
		l.accounts = append(l.accounts, &accountQueue{id: d.m.AccountID})
	}
	a := l.accounts[i]
	j := slices.IndexFunc(a.batches, func(x *batchQueue) bool { return x.id == d.m.BatchID })
	if j < 0 {
		j = len(a.batches)
		a.batches = append(a.batches, &batchQueue{id: d.m.BatchID})
	}
	bq := a.batches[j]
	d.lane = l
	bq.ready = append(bq.ready, d)
	l.mu.Unlock()
	l.dispatch()
}

// done gives back the slot of a handled delivery, forgets the batch and
// account it leaves with nothing, and starts the next ones.
func (l *lane) done(d delivery) {
	l.mu.Lock()
	l.busy--
	for i, a := range l.accounts {
		if a.id != d.m.AccountID {
			continue
		}
		a.inflight--
		for j, bq := range a.batches {
			if bq.id == d.m.BatchID {
				bq.inflight--
				if bq.inflight == 0 && len(bq.ready) == 0 {
					a.batches = append(a.batches[:j], a.batches[j+1:]...)
					if a.next > j {
						a.next--
					}
				}
				break
			}
		}
		if len(a.batches) == 0 && a.inflight == 0 {
			l.accounts = append(l.accounts[:i], l.accounts[i+1:]...)
			if l.next > i {
				l.next--
			}
		}
		break
	}
	l.mu.Unlock()
	l.dispatch()
}

// dispatch starts ready deliveries while slots are free.
func (l *lane) dispatch() {
	for {
		l.mu.Lock()
		d, ok := l.pick()
		l.mu.Unlock()
		if !ok {
			return
		}
		l.start(d)
	}
}

// pick takes the next delivery in fair order and accounts for its slot;
// the caller holds mu.
func (l *lane) pick() (delivery, bool) {
	if l.busy >= l.slots || len(l.accounts) == 0 {
		return delivery{}, false
	}
	if l.next >= len(l.accounts) {
		l.next = 0
	}
	for i := range l.accounts {
		ai := (l.next + i) % len(l.accounts)
		a := l.accounts[ai]
		if a.inflight >= l.perAccount || len(a.batches) == 0 {
			continue
		}
		for j := range a.batches {
			bi := (a.next + j) % len(a.batches)
			bq := a.batches[bi]
			if len(bq.ready) == 0 || bq.inflight >= l.perBatch {
				continue
			}
			d := bq.ready[0]
			bq.ready[0] = delivery{} // the items go with the delivery
			bq.ready = bq.ready[1:]
			bq.inflight++
			a.inflight++
			l.busy++
			a.next = bi + 1
			l.next = ai + 1
			return d, true
		}
	}
	return delivery{}, false
}
